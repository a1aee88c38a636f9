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
//   4. reads everything back with a consumer in a consumer group
//      (consumer.subscribe + consumer.run: FindCoordinator, JoinGroup,
//      SyncGroup, Heartbeat, Fetch): each record must come back once, in
//      order, at its offset, with its key, value, headers and timestamp;
//      while it runs admin.describeGroups must show the group Stable with
//      that one member; it commits its offsets (OffsetCommit), which
//      admin.fetchOffsets (OffsetFetch) must give as the partitions' ends;
//      it disconnects (LeaveGroup), after which the group is Empty and
//      admin.deleteGroups (DeleteGroups) removes it;
//   5. transactions (transaction version 1, as kafkajs speaks it:
//      InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn):
//      a transactional producer commits one transaction, aborts one and
//      commits a third, each over every partition of a second topic; a
//      read_committed consumer (kafkajs's default) must see exactly the
//      records of the two committed ones, in order, and none of the
//      aborted one, and so must kcat (-X isolation.level=read_committed,
//      to the end of every partition);
//   6. consume-transform-produce: a consumer of the topic of 1-4 in a new
//      group copies each batch to a third topic in a transaction that also
//      carries the group's offsets (transaction.sendOffsets:
//      AddOffsetsToTxn, TxnOffsetCommit); the copy, read read_committed,
//      must hold each input record once, and the group's committed offsets
//      must be the input's ends;
//   7. deletes the topics (DeleteTopics) and checks they are no longer
//      listed.
//
// Exits 0 when everything matched; otherwise prints what did not to stderr
// and exits 1. See examples/kafka/README.md.
'use strict';

const { spawnSync } = require('child_process');
const crypto = require('crypto');
const path = require('path');

const NAME = 'kafkajs';
const STEP_TIMEOUT_MS = 30000;

// Group members' timings: a session of 10 s (the broker's minimum is 6 s)
// and a heartbeat every second, so that a step waits on no default of
// kafkajs's (30 s, 3 s); fetches wait at most 500 ms for data.
const GROUP_TIMINGS = { sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 };

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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// consumeUntil joins groupId as a new consumer of topic (from the
// beginning, offsets committed by hand), hands each message to onMessage
// and resolves with the consumer, still a member, once done() holds; it
// fails after STEP_TIMEOUT_MS, or when onMessage throws or the consumer
// crashes. The caller disconnects the consumer.
async function consumeUntil(kafka, { groupId, topic, readUncommitted = false, onMessage, eachBatch, done, what }) {
  const consumer = kafka.consumer({ groupId, readUncommitted, allowAutoTopicCreation: false, ...GROUP_TIMINGS });
  let settle;
  const finished = new Promise((resolve, reject) => { settle = { resolve, reject }; });
  const timer = setTimeout(() => settle.reject(new Failure(`${what}: not done after ${STEP_TIMEOUT_MS / 1000} s`)), STEP_TIMEOUT_MS);
  const stopCrash = consumer.on(consumer.events.CRASH, ({ payload }) => settle.reject(new Failure(`${what}: the consumer crashed: ${payload.error && payload.error.message}`)));
  try {
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    const guard = (fn) => async (arg) => {
      try {
        await fn(arg);
        if (done()) settle.resolve();
      } catch (e) {
        // kafkajs would retry a throwing handler; the run fails instead.
        settle.reject(e);
        throw e;
      }
    };
    await consumer.run(eachBatch
      ? { autoCommit: false, eachBatchAutoResolve: false, eachBatch: guard(eachBatch) }
      : { autoCommit: false, eachMessage: guard(onMessage) });
    await finished;
  } catch (e) {
    await consumer.disconnect().catch(() => {});
    throw e;
  } finally {
    clearTimeout(timer);
    stopCrash();
  }
  return consumer;
}

// headerText turns kafkajs's decoded headers (Buffers) into strings.
function headerText(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers || {})) out[k] = Array.isArray(v) ? v.map(String) : v === null ? null : String(v);
  return out;
}

// groupConsume reads the topic back in a consumer group and checks every
// record against expected; then the group's description, its committed
// offsets, LeaveGroup and DeleteGroups.
async function groupConsume(kafka, admin, topic, partitions, expected, counts) {
  const groupId = `sluice-kafkajs-group-${crypto.randomBytes(4).toString('hex')}`;
  const next = new Array(partitions).fill(0);
  let seen = 0;
  const consumer = await consumeUntil(kafka, {
    groupId, topic, what: `group ${groupId}`,
    done: () => seen === expected.size,
    onMessage: async ({ partition, message: m }) => {
      const off = Number(m.offset);
      if (off !== next[partition]) fail(`group consumer: partition ${partition} gave offset ${off}, expected ${next[partition]} (in order, each once)`);
      next[partition]++;
      seen++;
      const r = expected.get(`${partition}/${off}`);
      if (!r) fail(`group consumer: partition ${partition} offset ${off} was never produced`);
      const got = {
        key: m.key === null ? null : String(m.key),
        value: m.value === null ? null : String(m.value),
        headers: headerText(m.headers),
        timestamp: m.timestamp,
      };
      if (got.key !== r.key || got.value !== r.value || JSON.stringify(got.headers) !== JSON.stringify(r.headers) ||
          got.timestamp !== r.timestamp) {
        fail(`group consumer: partition ${partition} offset ${off}: got ${JSON.stringify(got)}, produced ${JSON.stringify(r)}`);
      }
    },
  });
  try {
    const described = await admin.describeGroups([groupId]);
    const g = described.groups.find((x) => x.groupId === groupId);
    if (!g || g.state !== 'Stable' || g.protocolType !== 'consumer' || g.members.length !== 1) {
      fail(`describeGroups while consuming: ${JSON.stringify(g, (k, v) => (k === 'memberMetadata' || k === 'memberAssignment' ? undefined : v))}, expected Stable with one member`);
    }
    log(`group ${groupId}: ${seen} records, per partition ${JSON.stringify(next)}, each once, in order, key, value, headers and ` +
      `timestamp as produced; describeGroups: ${g.state}, protocol ${g.protocol}, member ${g.members[0].memberId}`);
    await consumer.commitOffsets(counts.map((c, p) => ({ topic, partition: p, offset: String(c) })));
  } finally {
    await consumer.disconnect();
  }
  await checkCommitted(admin, groupId, topic, counts, 'after OffsetCommit');
  const after = (await admin.describeGroups([groupId])).groups.find((x) => x.groupId === groupId);
  if (!after || after.state !== 'Empty' || after.members.length !== 0) {
    fail(`describeGroups after the consumer left (LeaveGroup): ${JSON.stringify(after)}, expected Empty without members`);
  }
  await admin.deleteGroups([groupId]);
  if ((await admin.listGroups()).groups.some((x) => x.groupId === groupId)) fail(`listGroups still lists ${groupId} after deleteGroups`);
  log(`group ${groupId}: committed offsets ${JSON.stringify(counts)} (fetchOffsets), Empty after LeaveGroup, deleted (deleteGroups)`);
}

// checkCommitted fails unless groupId's committed offsets on topic are counts.
async function checkCommitted(admin, groupId, topic, counts, when) {
  const fetched = await admin.fetchOffsets({ groupId, topics: [topic] });
  const t = fetched.find((x) => x.topic === topic);
  const got = new Array(counts.length).fill(null);
  for (const p of (t ? t.partitions : [])) got[p.partition] = Number(p.offset);
  if (JSON.stringify(got) !== JSON.stringify(counts)) {
    fail(`fetchOffsets ${groupId} ${when}: committed ${JSON.stringify(got)}, expected the ends ${JSON.stringify(counts)}`);
  }
}

// kcatCommitted reads topic to the end of every partition with kcat and
// isolation.level=read_committed; returns [{partition, offset, key, payload}].
function kcatCommitted(kcat, bootstrap, topic) {
  const r = spawnSync(kcat, ['-b', bootstrap, '-C', '-t', topic, '-o', 'beginning', '-e', '-J', '-X', 'isolation.level=read_committed'], {
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

// compareValues fails, naming what is missing, duplicated or extra, unless
// got (values) holds each of want exactly once and nothing else.
function compareValues(what, want, got) {
  const n = new Map();
  for (const v of got) n.set(v, (n.get(v) || 0) + 1);
  const missing = want.filter((v) => !n.has(v));
  const dup = [...n].filter(([v, c]) => c > 1 && want.includes(v)).map(([v, c]) => `${v} x${c}`);
  const extra = [...n.keys()].filter((v) => !want.includes(v));
  if (missing.length || dup.length || extra.length || got.length !== want.length) {
    fail(`${what}: ${got.length} records for ${want.length}; missing ${JSON.stringify(missing.slice(0, 10))}, ` +
      `duplicated ${JSON.stringify(dup.slice(0, 10))}, not expected ${JSON.stringify(extra.slice(0, 10))}`);
  }
}

// transactions commits, aborts and commits a transaction over every
// partition of topic, then reads it read_committed with kafkajs and kcat.
async function transactions(kafka, admin, txProducer, topic, partitions, bootstrap, kcat) {
  const per = 2 * partitions; // records per transaction: every partition twice
  const rounds = [['c1', 'commit'], ['a', 'abort'], ['c2', 'commit']];
  const want = [];
  for (const [round, end] of rounds) {
    const txn = await txProducer.transaction();
    const msgs = [];
    for (let i = 0; i < per; i++) msgs.push({ partition: i % partitions, key: `${round}-${i}`, value: `${round} ${i}` });
    await txn.send({ topic, acks: -1, messages: msgs.slice(0, partitions) });
    await txn.send({ topic, acks: -1, messages: msgs.slice(partitions) });
    if (end === 'commit') {
      await txn.commit();
      want.push(...msgs.map((m) => m.value));
    } else {
      await txn.abort();
    }
  }
  // Each transaction ends with a marker in every partition. The
  // coordinator writes them after EndTxn is answered (as Kafka's does), so
  // until the last one is written the last stable offset, which
  // fetchTopicOffsets gives (ListOffsets read_committed), stays at the
  // start of the last transaction: wait for the end.
  const deadline = Date.now() + STEP_TIMEOUT_MS;
  for (;;) {
    const offsets = await admin.fetchTopicOffsets(topic);
    const short = offsets.filter((o) => Number(o.high) !== 3 * (per / partitions) + 3);
    if (short.length === 0) break;
    if (Date.now() > deadline) {
      fail(`transactions: last stable offsets ${JSON.stringify(short.map((o) => [o.partition, Number(o.high)]))} (partition, offset) ` +
        `${STEP_TIMEOUT_MS / 1000} s after the last EndTxn, expected ${3 * (per / partitions)} records and 3 markers in each`);
    }
    await sleep(100);
  }
  log(`transactions on ${topic}: committed ${per} records, aborted ${per}, committed ${per} (EndTxn), ` +
    `${3 * (per / partitions)} records and 3 markers in each partition`);

  // kafkajs, read_committed: the second committed transaction comes after
  // the aborted one in every partition, so once it has every committed
  // record it has read past all the aborted ones.
  const got = [];
  const groupId = `sluice-kafkajs-rc-${crypto.randomBytes(4).toString('hex')}`;
  const order = new Array(partitions).fill('');
  const c = await consumeUntil(kafka, {
    groupId, topic, what: `read_committed consumer of ${topic}`,
    done: () => got.length >= want.length,
    onMessage: async ({ partition, message: m }) => {
      const v = String(m.value);
      if (v.startsWith('a ')) fail(`read_committed consumer: got ${JSON.stringify(v)} of the aborted transaction at ${partition}/${m.offset}`);
      if (v.startsWith('c1') && order[partition] === 'c2') fail(`read_committed consumer: partition ${partition} gave c1 after c2`);
      order[partition] = v.slice(0, 2);
      got.push(v);
    },
  });
  await c.disconnect();
  await admin.deleteGroups([groupId]);
  compareValues('read_committed consumer (kafkajs)', want, got);
  const k = kcatCommitted(kcat, bootstrap, topic).map((m) => m.payload);
  compareValues('kcat -X isolation.level=read_committed', want, k);
  log(`read_committed: kafkajs and kcat each read the ${want.length} committed records once, none of the aborted ones`);
}

// copy consumes input in a new group and copies each batch to output in a
// transaction that also commits the group's offsets (sendOffsets); then
// checks the copy (read_committed) and the group's committed offsets.
async function copy(kafka, admin, txProducer, input, output, partitions, expected, counts) {
  const groupId = `sluice-kafkajs-copier-${crypto.randomBytes(4).toString('hex')}`;
  const copied = new Array(partitions).fill(0);
  let txns = 0;
  const c = await consumeUntil(kafka, {
    groupId, topic: input, what: `copier group ${groupId}`,
    done: () => copied.every((n, p) => n === counts[p]),
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      if (batch.messages.length === 0) return;
      const txn = await txProducer.transaction();
      try {
        await txn.send({
          topic: output,
          acks: -1,
          messages: batch.messages.map((m) => ({
            partition: batch.partition,
            key: `${batch.partition}/${m.offset}`,
            value: m.value === null ? null : Buffer.concat([Buffer.from('copy:'), m.value]),
            headers: m.headers,
          })),
        });
        const last = Number(batch.messages[batch.messages.length - 1].offset);
        await txn.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: input, partitions: [{ partition: batch.partition, offset: String(last + 1) }] }] });
        await txn.commit();
      } catch (e) {
        await txn.abort().catch(() => {});
        throw e;
      }
      txns++;
      for (const m of batch.messages) resolveOffset(m.offset);
      copied[batch.partition] += batch.messages.length;
      await heartbeat();
    },
  });
  await c.disconnect();
  await checkCommitted(admin, groupId, input, counts, 'after the transactional copy (sendOffsets)');

  // The copy, read_committed: each input record once, as key "p/o".
  const want = [...expected].map(([at, r]) => `${at}=${r.value === null ? null : `copy:${r.value}`}`);
  const got = [];
  const rc = `sluice-kafkajs-rc-${crypto.randomBytes(4).toString('hex')}`;
  const r = await consumeUntil(kafka, {
    groupId: rc, topic: output, what: `read_committed consumer of ${output}`,
    done: () => got.length >= want.length,
    onMessage: async ({ partition, message: m }) => {
      const key = String(m.key);
      if (!key.startsWith(`${partition}/`)) fail(`copy: ${key} in partition ${partition}`);
      got.push(`${key}=${m.value === null ? null : String(m.value)}`);
    },
  });
  await r.disconnect();
  await admin.deleteGroups([groupId, rc]);
  compareValues(`copy ${output}`, want, got);
  log(`copied ${input} to ${output} in ${txns} transactions with sendOffsets (AddOffsetsToTxn, TxnOffsetCommit): ` +
    `each of the ${want.length} records once (read_committed); the group's committed offsets are the input's ends ${JSON.stringify(counts)}`);
}

async function deleteTopics(admin, topics) {
  await admin.deleteTopics({ topics, timeout: STEP_TIMEOUT_MS });
  const deadline = Date.now() + STEP_TIMEOUT_MS;
  for (;;) {
    const listed = await admin.listTopics();
    if (!topics.some((t) => listed.includes(t))) break;
    if (Date.now() > deadline) fail(`${topics.filter((t) => listed.includes(t))} still listed after deleteTopics`);
    await sleep(200);
  }
  log(`deleted ${topics.join(', ')}`);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { Kafka, CompressionTypes, Partitioners, logLevel } = loadKafkajs();
  const version = require('kafkajs/package.json').version;
  const id = crypto.randomBytes(6).toString('hex');
  const topic = args.topic || `kafkajs-${id}`;
  const txTopic = `${topic}-txn`;
  const copyTopic = `${topic}-copy`;
  log(`kafkajs ${version}, node ${process.version}, against ${args.bootstrap}`);

  const kafka = new Kafka({
    clientId: 'sluice-kafkajs-example',
    brokers: [args.bootstrap],
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.WARN,
    logCreator: quietLogger,
    // Bounded, so that a failing run ends with the error rather than
    // retrying for ever (the idempotent producer's default).
    retry: { retries: 5 },
  });
  const admin = kafka.admin();
  // Every record names its partition; createPartitioner only silences
  // kafkajs 2's warning that its default partitioner changed.
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  const txProducer = kafka.producer({
    transactionalId: `sluice-kafkajs-${id}`,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await admin.connect();
  try {
    for (const t of [topic, txTopic, copyTopic]) await createTopic(admin, t, args.partitions, args.replicationFactor);
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

    await groupConsume(kafka, admin, topic, args.partitions, expected, counts);
    await txProducer.connect();
    await transactions(kafka, admin, txProducer, txTopic, args.partitions, args.bootstrap, args.kcat);
    await copy(kafka, admin, txProducer, topic, copyTopic, args.partitions, expected, counts);
    await txProducer.disconnect();

    await deleteTopics(admin, [topic, txTopic, copyTopic]);
  } finally {
    await producer.disconnect().catch(() => {});
    await txProducer.disconnect().catch(() => {});
    await admin.disconnect().catch(() => {});
  }
  log('all checks passed');
}

main().catch((e) => {
  console.error(`${NAME}: FAILED: ${e instanceof Failure ? e.message : (e && e.stack) || e}`);
  process.exit(1);
});
