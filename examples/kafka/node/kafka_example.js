#!/usr/bin/env node
// Sluice's Kafka listener from Node.js, with kafkajs.
//
// No Sluice code: kafkajs (pinned by package-lock.json) against a running
// broker's Kafka address (sluiced --kafka-listen). It
//
//   1. creates a topic with the admin client (CreateTopics, waiting for
//      leaders) and checks its Metadata: partitions and replication factor;
//   2. produces with an idempotent producer (idempotent: true:
//      InitProducerId; acks -1, one request in flight) records spread over
//      the partitions, in several sends, uncompressed and gzip-compressed
//      (the one codec kafkajs ships; snappy, lz4 and zstd need codec
//      plugins from other packages and are not tried): keys, a null key, a
//      null and an empty value, headers, explicit timestamps; every send
//      must be answered without error, and the offsets of one partition
//      must follow each other;
//   3. checks ListOffsets (admin.fetchTopicOffsets): low 0, high the count;
//   4. reads everything back with kcat (librdkafka): kafkajs consumes only
//      in a consumer group (JoinGroup, SyncGroup, ...), which the Kafka
//      listener serves from issue 35 on; each record must come back once,
//      in order, at its offset, with its key, value, headers and timestamp;
//   5. deletes the topic (DeleteTopics) and checks it is no longer listed.
//
// Exits 0 when everything matched; otherwise prints what did not to stderr
// and exits 1. See examples/kafka/README.md.
'use strict';

const { spawnSync } = require('child_process');
const crypto = require('crypto');
const path = require('path');

const NAME = 'kafkajs';
const STEP_TIMEOUT_MS = 30000;

class Failure extends Error {}

function fail(msg) {
  throw new Failure(msg);
}

function log(msg) {
  console.log(`${NAME}: ${msg}`);
}

// quietLogger is kafkajs's JSON logger minus its warning that bounded
// retries may break the idempotent producer's guarantees: the bound is
// deliberate here (above), and a retry that gives up fails the run.
function quietLogger() {
  return ({ namespace, label, log: entry }) => {
    if (/Limiting retries for the idempotent producer/.test(entry.message)) return;
    console.error(JSON.stringify({ level: label, logger: 'kafkajs', namespace, ...entry }));
  };
}

function parseArgs(argv) {
  const args = {
    bootstrap: process.env.SLUICE_KAFKA_BOOTSTRAP || '127.0.0.1:9092',
    topic: '',
    partitions: 2,
    replicationFactor: 1,
    records: 20,
    kcat: 'kcat',
  };
  const names = {
    '--bootstrap': 'bootstrap', '--topic': 'topic', '--partitions': 'partitions',
    '--replication-factor': 'replicationFactor', '--records': 'records', '--kcat': 'kcat',
  };
  for (let i = 0; i < argv.length; i++) {
    const key = names[argv[i]];
    if (!key || i + 1 >= argv.length) {
      console.error(`usage: kafka_example.js [--bootstrap HOST:PORT] [--topic NAME] [--partitions N] ` +
        `[--replication-factor N] [--records N] [--kcat PATH]`);
      process.exit(2);
    }
    const v = argv[++i];
    args[key] = typeof args[key] === 'number' ? Number(v) : v;
  }
  if (!(args.records >= 4)) fail('--records must be at least 4');
  return args;
}

function loadKafkajs() {
  try {
    return require('kafkajs');
  } catch (e) {
    fail(`cannot load kafkajs (${e.message}): run npm ci in ${path.relative(process.cwd(), __dirname) || '.'}`);
  }
}

// The i-th record of a round: what kafkajs sends, and what kcat must print.
function recordFor(round, i, partitions, baseTs) {
  const partition = i % partitions;
  let key = `${round}-key-${i}`;
  let value = `${round} record ${i} ` + 'sluice '.repeat(40);
  let headers = { round, i: String(i) };
  if (i === 0) key = null;
  if (i === 1) value = null;
  if (i === 2) {
    value = '';
    headers = {};
  }
  return { partition, key, value, headers, timestamp: String(baseTs + i) };
}

async function createTopic(admin, topic, partitions, rf) {
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions: partitions, replicationFactor: rf }],
    waitForLeaders: true,
    timeout: STEP_TIMEOUT_MS,
  });
  if (!created) fail(`createTopics ${topic}: answered false (the topic existed)`);
  const md = await admin.fetchTopicMetadata({ topics: [topic] });
  const t = md.topics.find((x) => x.name === topic);
  if (!t || t.partitions.length !== partitions ||
      t.partitions.some((p) => p.leader < 0 || p.replicas.length !== rf || p.isr.length !== rf)) {
    fail(`Metadata for ${topic}: ${JSON.stringify(t)}`);
  }
  const leaders = [...new Set(t.partitions.map((p) => p.leader))].sort();
  log(`created ${topic}: ${partitions} partitions, replication factor ${rf}, leaders on brokers ${JSON.stringify(leaders)}`);
}

// produce sends one round of n records in sends of 5; returns a Map
// "partition/offset" -> record.
async function produce(producer, CompressionTypes, topic, round, compression, n, partitions, baseTs) {
  const out = new Map();
  for (let first = 0; first < n; first += 5) {
    const recs = [];
    for (let i = first; i < Math.min(first + 5, n); i++) recs.push({ i, ...recordFor(round, i, partitions, baseTs) });
    const meta = await producer.send({
      topic,
      acks: -1,
      timeout: STEP_TIMEOUT_MS,
      compression: CompressionTypes[compression],
      messages: recs.map((r) => ({ partition: r.partition, key: r.key, value: r.value, headers: r.headers, timestamp: r.timestamp })),
    });
    // One answer per partition: its base offset; the partition's records
    // of this send follow it in the order sent.
    for (const m of meta) {
      if (m.errorCode !== 0) fail(`${round}: produce answered error ${m.errorCode} for partition ${m.partition}`);
      const mine = recs.filter((r) => r.partition === m.partition);
      mine.forEach((r, k) => {
        const at = `${m.partition}/${Number(m.baseOffset) + k}`;
        if (out.has(at)) fail(`${round}: offset ${at} answered twice`);
        out.set(at, r);
      });
    }
    if (meta.reduce((s, m) => s + recs.filter((r) => r.partition === m.partition).length, 0) !== recs.length) {
      fail(`${round}: produce answered partitions ${JSON.stringify(meta.map((m) => m.partition))} for records on ${JSON.stringify([...new Set(recs.map((r) => r.partition))])}`);
    }
  }
  log(`${round}: ${n} records produced (${compression}, idempotent, acks -1)`);
  return out;
}

function readBack(kcat, bootstrap, topic) {
  const r = spawnSync(kcat, ['-b', bootstrap, '-C', '-t', topic, '-o', 'beginning', '-e', '-J'], {
    encoding: 'utf8',
    timeout: STEP_TIMEOUT_MS,
  });
  if (r.error) {
    if (r.error.code === 'ENOENT') fail(`${kcat} not found: install Debian's kcat (apt-get install kcat)`);
    fail(`kcat -C: ${r.error.code === 'ETIMEDOUT' ? `did not reach the end within ${STEP_TIMEOUT_MS / 1000} s` : r.error.message}; ` +
      `its last lines: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`);
  }
  if (r.status !== 0) fail(`kcat -C exited ${r.status}: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`);
  return r.stdout.split('\n').filter((l) => l).map((l) => JSON.parse(l));
}

function check(expected, got, partitions) {
  const next = new Array(partitions).fill(0);
  for (const m of got) {
    if (m.offset !== next[m.partition]) {
      fail(`read back: partition ${m.partition} gave offset ${m.offset}, expected ${next[m.partition]} (in order, each once)`);
    }
    next[m.partition]++;
    const r = expected.get(`${m.partition}/${m.offset}`);
    if (!r) fail(`read back: partition ${m.partition} offset ${m.offset} was never produced`);
    const headers = [];
    for (const [k, v] of Object.entries(r.headers)) headers.push(k, v);
    const gotHeaders = m.headers || [];
    if (m.key !== r.key || m.payload !== r.value || JSON.stringify(gotHeaders) !== JSON.stringify(headers) ||
        m.tstype !== 'create' || String(m.ts) !== r.timestamp) {
      fail(`read back: partition ${m.partition} offset ${m.offset}: got ${JSON.stringify(m)}, produced ${JSON.stringify(r)}`);
    }
  }
  if (got.length !== expected.size) fail(`read back ${got.length} records, produced ${expected.size}`);
  return next;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { Kafka, CompressionTypes, Partitioners, logLevel } = loadKafkajs();
  const version = require('kafkajs/package.json').version;
  const topic = args.topic || `kafkajs-${crypto.randomBytes(6).toString('hex')}`;
  log(`kafkajs ${version}, node ${process.version}, against ${args.bootstrap}`);

  const kafka = new Kafka({
    clientId: 'sluice-kafkajs-example',
    brokers: [args.bootstrap],
    logLevel: logLevel.WARN,
    logCreator: quietLogger,
    // Bounded, so that a failing run ends with the error rather than
    // retrying for ever (the idempotent producer's default).
    retry: { retries: 5 },
  });
  const admin = kafka.admin();
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    // Every record names its partition; this only silences kafkajs 2's
    // warning that its default partitioner changed.
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await admin.connect();
  try {
    await createTopic(admin, topic, args.partitions, args.replicationFactor);
    await producer.connect();
    const expected = new Map();
    const baseTs = Date.now() - 60000;
    for (const [n, compression] of ['None', 'GZIP'].entries()) {
      const got = await produce(producer, CompressionTypes, topic, compression.toLowerCase(), compression,
        args.records, args.partitions, baseTs + 1000 * n);
      for (const [k, v] of got) {
        if (expected.has(k)) fail(`offset ${k} produced twice`);
        expected.set(k, v);
      }
    }
    await producer.disconnect();

    const offsets = await admin.fetchTopicOffsets(topic);
    const counts = new Array(args.partitions).fill(0);
    for (const k of expected.keys()) counts[Number(k.split('/')[0])]++;
    for (const o of offsets) {
      if (Number(o.low) !== 0 || Number(o.high) !== counts[o.partition]) {
        fail(`ListOffsets: partition ${o.partition} low ${o.low} high ${o.high}, expected 0 and ${counts[o.partition]}`);
      }
    }
    log(`ListOffsets: ${JSON.stringify(offsets.map((o) => [o.partition, Number(o.low), Number(o.high)]))} (partition, low, high)`);

    const read = check(expected, readBack(args.kcat, args.bootstrap, topic), args.partitions);
    log(`read back with kcat (kafkajs consumes only in a group: issue 35): ${expected.size} records, ` +
      `per partition ${JSON.stringify(read)}, each once, in order, key, value, headers and timestamp as produced`);

    await admin.deleteTopics({ topics: [topic], timeout: STEP_TIMEOUT_MS });
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    while ((await admin.listTopics()).includes(topic)) {
      if (Date.now() > deadline) fail(`${topic} still listed after deleteTopics`);
      await new Promise((r) => setTimeout(r, 200));
    }
    log(`deleted ${topic}`);
  } finally {
    await producer.disconnect().catch(() => {});
    await admin.disconnect().catch(() => {});
  }
  log('all checks passed');
}

main().catch((e) => {
  console.error(`${NAME}: FAILED: ${e instanceof Failure ? e.message : (e && e.stack) || e}`);
  process.exit(1);
});
