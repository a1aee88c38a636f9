#!/usr/bin/env node
// Sluice from Node.js, through the public gRPC API only.
//
// Loads proto/sluice/v1/*.proto at start (protobufjs and
// @grpc/proto-loader: nothing generated is committed), then against a
// running broker:
//
//  1. creates a topic with 2 partitions (Admin/CreateTopics) and waits for
//     their leaders (Admin/Metadata); every produce and fetch goes to the
//     partition's leader;
//  2. produces idempotently (Transactions/InitProducerId, batches carrying
//     the producer id, epoch and base sequence), sends one batch twice as a
//     retry after a lost answer would, and checks that the retry is
//     answered NONE with the original base offset;
//  3. runs three transactions across both partitions (FindCoordinator,
//     InitProducerId with a transactional id, produce with the
//     transactional id, EndTxn): commit, abort, commit;
//  4. fetches both partitions read_uncommitted (every record, the aborted
//     ones included) and read_committed (no aborted record: the broker
//     leaves them out; this program filters nothing) and checks that each
//     record came back exactly once, in order, at the offset its produce
//     answered.
//
// Exits 0 when everything matched; otherwise prints what did not to stderr
// and exits 1. See examples/README.md. Needs `npm ci` in this directory.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const NAME = 'node example';

// RecordBatch attribute bits (docs/record-format.md).
const ATTR_TRANSACTIONAL = 0x10;
const ATTR_CONTROL = 0x20;

// Bounds of this program's waits, in milliseconds.
const RPC_TIMEOUT = 10000; // one gRPC call
const STEP_TIMEOUT = 30000; // one step with its retries

class Failure extends Error {}

function fail(msg) {
  throw new Failure(msg);
}

function log(msg) {
  console.log(`${NAME}: ${msg}`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function requireDependency(name) {
  try {
    return require(name);
  } catch (e) {
    fail(`cannot load ${name} (${e.code || e.message}): run \`npm ci\` in ${__dirname} ` +
      '(Node.js and npm from Debian\'s nodejs and npm packages)');
  }
}

// loadProtos parses the public protos with protobufjs, keeping the custom
// options (the retriable flag of each ErrorCode), and turns the same
// schema into gRPC service constructors with @grpc/proto-loader.
function loadProtos(protoDir) {
  const grpc = requireDependency('@grpc/grpc-js');
  const protoLoader = requireDependency('@grpc/proto-loader');
  const protobuf = requireDependency('protobufjs');
  const dir = path.join(protoDir, 'sluice', 'v1');
  let files;
  try {
    files = fs.readdirSync(dir).filter((f) => f.endsWith('.proto')).sort().map((f) => `sluice/v1/${f}`);
  } catch (e) {
    fail(`cannot read ${dir} (--proto-dir): ${e.message}`);
  }
  // errors.proto imports google/protobuf/descriptor.proto, which protobufjs ships.
  const includeDirs = [protoDir, path.dirname(require.resolve('protobufjs/package.json'))];
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => {
    for (const d of includeDirs) {
      const f = path.join(d, target);
      if (fs.existsSync(f)) return f;
    }
    return target;
  };
  try {
    root.loadSync(files, { keepCase: true });
    root.resolveAll();
  } catch (e) {
    fail(`loading ${files.join(', ')} from ${protoDir}: ${e.message}`);
  }
  const pkg = grpc.loadPackageDefinition(protoLoader.fromJSON(root.toJSON(), {
    keepCase: true, // field names as in the .proto files
    longs: String, // int64 as decimal strings; arithmetic below uses BigInt
    enums: String, // enum values by name ("NONE", "ACKS_ALL", ...)
    defaults: true, // absent fields decoded with their zero value
  }));
  return { grpc, sluice: pkg.sluice.v1, errorCodes: root.lookupEnum('sluice.v1.ErrorCode') };
}

let grpc; let sluice; let errorCodes;

// retriable reports whether the broker says code (a name) may succeed when
// sent again: the (sluice.v1.retriable) option on the ErrorCode value.
function retriable(code) {
  const opts = (errorCodes.valuesOptions || {})[code];
  return Boolean(opts && opts['(retriable)']);
}

// retry calls attempt() until it succeeds, retrying retriable answers.
// attempt resolves to [errorCode, errorMessage, result]. A retriable code,
// or a gRPC UNAVAILABLE or DEADLINE_EXCEEDED status, is retried after a
// pause (50 ms doubling to 1 s) for up to STEP_TIMEOUT, calling
// onRetriable(code) first (e.g. to look the leader up again); any other
// code or status fails the run.
async function retry(what, attempt, onRetriable) {
  const deadline = Date.now() + STEP_TIMEOUT;
  let delay = 50;
  for (;;) {
    let code; let msg; let result;
    try {
      [code, msg, result] = await attempt();
    } catch (e) {
      if (e instanceof Failure || typeof e.code !== 'number') throw e; // not a gRPC status
      if (e.code !== grpc.status.UNAVAILABLE && e.code !== grpc.status.DEADLINE_EXCEEDED) {
        fail(`${what}: gRPC ${grpc.status[e.code] || e.code}: ${e.details || e.message}`);
      }
      [code, msg] = [null, `gRPC ${grpc.status[e.code]}: ${e.details}`];
    }
    if (code === 'NONE') return result;
    if (code !== null && !retriable(code)) fail(`${what}: ${code}: ${msg}`);
    if (Date.now() + delay > deadline) {
      fail(`${what}: still failing after ${STEP_TIMEOUT / 1000} s: ${code ? `${code}: ` : ''}${msg}`);
    }
    if (onRetriable && code !== null) await onRetriable(code);
    await sleep(delay);
    delay = Math.min(delay * 2, 1000);
  }
}

// call makes one unary call with the RPC_TIMEOUT deadline.
function call(client, method, req) {
  return new Promise((resolve, reject) => {
    client[method](req, { deadline: Date.now() + RPC_TIMEOUT }, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
}

const LEADER_CODES = new Set(['NOT_LEADER_OR_FOLLOWER', 'LEADER_NOT_AVAILABLE', 'UNKNOWN_TOPIC_OR_PARTITION',
  'FENCED_LEADER_EPOCH', 'UNKNOWN_LEADER_EPOCH', 'NEW_LEADER_ELECTED']);

// Cluster holds the connections to the brokers and the partition leaders
// of one topic.
class Cluster {
  constructor(bootstrap, topic) {
    this.bootstrap = bootstrap;
    this.topic = topic;
    this.clients = new Map(); // "Service@addr" -> client
    this.leaders = new Map(); // partition -> leader's address
  }

  client(service, addr) {
    const key = `${service}@${addr}`;
    if (!this.clients.has(key)) {
      this.clients.set(key, new sluice[service](addr, grpc.credentials.createInsecure()));
    }
    return this.clients.get(key);
  }

  admin() { return this.client('Admin', this.bootstrap); }

  log(addr) { return this.client('Log', addr); }

  transactions(addr) { return this.client('Transactions', addr || this.bootstrap); }

  close() {
    for (const c of this.clients.values()) c.close();
  }

  async createTopic(partitions, replicationFactor) {
    const req = {
      topics: [{ name: this.topic, num_partitions: partitions, replication_factor: replicationFactor }],
      timeout_ms: RPC_TIMEOUT,
    };
    await retry(`CreateTopics ${this.topic}`, async () => {
      const r = (await call(this.admin(), 'CreateTopics', req)).topics[0];
      return [r.error_code, r.error_message, null];
    });
  }

  // refreshLeaders waits until Metadata names a leader for every partition
  // and records each leader's address.
  async refreshLeaders(partitions) {
    this.leaders = await retry(`Metadata ${this.topic}`, async () => {
      const md = await call(this.admin(), 'Metadata', { topics: [this.topic] });
      const brokers = new Map(md.brokers.map((b) => [b.node_id, b.address]));
      const t = md.topics.find((x) => x.name === this.topic);
      if (!t) return ['UNKNOWN_TOPIC_OR_PARTITION', 'not in the metadata yet', null];
      if (t.error_code !== 'NONE') return [t.error_code, t.error_message, null];
      const leaders = new Map(t.partitions.map((p) => [p.partition, brokers.get(p.leader_id)]));
      for (let p = 0; p < partitions; p++) {
        if (!leaders.get(p)) return ['LEADER_NOT_AVAILABLE', `partition ${p} has no leader yet`, null];
      }
      return ['NONE', '', leaders];
    });
  }

  async onPartitionError(code) {
    if (LEADER_CODES.has(code)) await this.refreshLeaders(this.leaders.size);
  }

  // produce sends batch to the partition's leader with acks=all, retrying
  // retriable answers with the same batch (the broker deduplicates by
  // producer id, epoch and sequence); resolves to the base offset (BigInt).
  async produce(partition, batch, transactionalId = '') {
    const req = {
      transactional_id: transactionalId,
      acks: 'ACKS_ALL',
      timeout_ms: RPC_TIMEOUT,
      topics: [{ name: this.topic, partitions: [{ partition, batch }] }],
    };
    return retry(`Produce ${this.topic}-${partition}`, async () => {
      const p = (await call(this.log(this.leaders.get(partition)), 'Produce', req)).topics[0].partitions[0];
      return [p.error_code, p.error_message, BigInt(p.base_offset)];
    }, (code) => this.onPartitionError(code));
  }

  // fetchAll reads the partition from offset 0 to its end with the
  // isolation level, starting each fetch at the previous answer's
  // next_fetch_offset; resolves to [[offset (BigInt), value (string)]].
  // The end: read_uncommitted, the high watermark; read_committed, the
  // high watermark once the last stable offset has reached it (every
  // transaction's markers written).
  async fetchAll(partition, isolation) {
    let offset = 0n;
    const out = [];
    const deadline = Date.now() + STEP_TIMEOUT;
    const readCommitted = isolation === 'ISOLATION_LEVEL_READ_COMMITTED';
    for (;;) {
      const req = {
        max_wait_ms: 200,
        isolation_level: isolation,
        topics: [{
          name: this.topic,
          partitions: [{ partition, fetch_offset: offset.toString(), current_leader_epoch: -1 }],
        }],
      };
      const p = await retry(`Fetch ${this.topic}-${partition} at ${offset}`, async () => {
        const d = (await call(this.log(this.leaders.get(partition)), 'Fetch', req)).topics[0].partitions[0];
        return [d.error_code, d.error_message, d];
      }, (code) => this.onPartitionError(code));
      for (const b of p.batches) {
        if (b.attributes & ATTR_CONTROL) {
          fail(`Fetch ${this.topic}-${partition}: got a control batch at ${b.base_offset}; ` +
            'consumers must never see markers');
        }
        for (const r of b.records) {
          const o = BigInt(b.base_offset) + BigInt(r.offset_delta);
          if (o >= offset) out.push([o, Buffer.from(r.value).toString()]); // the first batch may start before fetch_offset
        }
      }
      const next = BigInt(p.next_fetch_offset);
      const hw = BigInt(p.high_watermark);
      const lso = BigInt(p.last_stable_offset);
      if (next < offset) {
        fail(`Fetch ${this.topic}-${partition}: next_fetch_offset ${next} is behind fetch_offset ${offset}`);
      }
      offset = next;
      if (offset >= hw && (!readCommitted || lso >= hw)) return out;
      if (Date.now() > deadline) {
        fail(`Fetch ${this.topic}-${partition}: not at the end after ${STEP_TIMEOUT / 1000} s ` +
          `(next offset ${offset}, high watermark ${hw}, last stable offset ${lso})`);
      }
    }
  }
}

// makeBatch builds a RecordBatch of values as a producer sends it
// (docs/record-format.md): crc 0 (the broker computes it), record_count
// and last_offset_delta from the records, record i at offset_delta i.
function makeBatch(values, producerId, producerEpoch, baseSequence, transactional = false) {
  const records = values.map((v, i) => ({
    timestamp_delta: 0, offset_delta: i, key: Buffer.from('k'), value: Buffer.from(v),
  }));
  return {
    crc: 0,
    attributes: transactional ? ATTR_TRANSACTIONAL : 0,
    last_offset_delta: records.length - 1,
    base_timestamp: Date.now().toString(),
    producer_id: producerId.toString(),
    producer_epoch: producerEpoch,
    base_sequence: baseSequence,
    record_count: records.length,
    records,
  };
}

async function initProducerId(cluster, transactionalId = '', addr = undefined, timeoutMs = 0) {
  const req = {
    transactional_id: transactionalId, transaction_timeout_ms: timeoutMs, producer_id: '-1', producer_epoch: -1,
  };
  return retry(`InitProducerId '${transactionalId}'`, async () => {
    const r = await call(cluster.transactions(addr), 'InitProducerId', req);
    return [r.error_code, r.error_message, [BigInt(r.producer_id), r.producer_epoch]];
  });
}

// idempotentProduce sends two batches per partition from an idempotent
// producer, the first twice; appends [offset, value] of each record to
// expected[partition].
async function idempotentProduce(cluster, partitions, expected) {
  const [pid, epoch] = await initProducerId(cluster);
  log(`idempotent producer: id ${pid}, epoch ${epoch}`);
  for (let p = 0; p < partitions; p++) {
    const first = [0, 1, 2].map((i) => `idempotent-p${p}-${i}`);
    const second = [3, 4].map((i) => `idempotent-p${p}-${i}`);
    const a = makeBatch(first, pid, epoch, 0);
    const offA = await cluster.produce(p, a);
    // A retry after a lost answer: the same batch (same sequence) again.
    const offRetry = await cluster.produce(p, a);
    if (offRetry !== offA) {
      fail(`partition ${p}: the duplicate of the batch at offset ${offA} was answered with offset ` +
        `${offRetry}; want the original offset ${offA}`);
    }
    const offB = await cluster.produce(p, makeBatch(second, pid, epoch, first.length));
    if (offB !== offA + BigInt(first.length)) {
      fail(`partition ${p}: the batch after the duplicate landed at ${offB}, want ` +
        `${offA + BigInt(first.length)} (the duplicate must not have been appended)`);
    }
    log(`partition ${p}: batch at ${offA}, its duplicate answered NONE with ${offRetry}, next batch at ${offB}`);
    first.forEach((v, i) => expected[p].push([offA + BigInt(i), v]));
    second.forEach((v, i) => expected[p].push([offB + BigInt(i), v]));
  }
}

// Transactor is a transactional producer driving TV2 by hand
// (docs/transactions.md, "Driving the protocol from any language").
class Transactor {
  constructor(cluster, transactionalId) {
    this.cluster = cluster;
    this.id = transactionalId;
  }

  async init() {
    await this.findCoordinator();
    [this.pid, this.epoch] = await initProducerId(this.cluster, this.id, this.coordinator, 30000);
  }

  async findCoordinator() {
    const req = { key_type: 'COORDINATOR_KEY_TYPE_TRANSACTION', keys: [this.id] };
    this.coordinator = await retry(`FindCoordinator ${this.id}`, async () => {
      const c = (await call(this.cluster.transactions(), 'FindCoordinator', req)).coordinators[0];
      return [c.error_code, c.error_message, c.address];
    });
  }

  // run writes 2 records to every partition in one transaction, then
  // EndTxn; resolves to Map(partition -> [[offset, value]]).
  async run(partitions, label, commit) {
    const written = new Map();
    for (let p = 0; p < partitions; p++) {
      const values = [0, 1].map((i) => `${label}-p${p}-${i}`);
      // Sequences restart at 0 in every epoch, and TV2 bumps the epoch at
      // every EndTxn.
      const off = await this.cluster.produce(p, makeBatch(values, this.pid, this.epoch, 0, true), this.id);
      written.set(p, values.map((v, i) => [off + BigInt(i), v]));
    }
    const req = {
      transactional_id: this.id, producer_id: this.pid.toString(), producer_epoch: this.epoch, committed: commit,
    };
    [this.pid, this.epoch] = await retry(`EndTxn ${commit ? 'commit' : 'abort'} ${this.id}`, async () => {
      const r = await call(this.cluster.transactions(this.coordinator), 'EndTxn', req);
      return [r.error_code, r.error_message, [BigInt(r.producer_id), r.producer_epoch]];
    }, async (code) => {
      if (code === 'NOT_COORDINATOR' || code === 'COORDINATOR_NOT_AVAILABLE') await this.findCoordinator();
    });
    const where = [...written].map(([p, w]) => `partition ${p} at ${w[0][0]}`).join(', ');
    log(`transaction ${label}: ${commit ? 'committed' : 'aborted'} (${where}); next epoch ${this.epoch}`);
    return written;
  }
}

// check fetches the partition with the isolation level and compares it
// with want, [[offset, value]] in offset order: every record exactly once,
// in order, at its offset.
async function check(cluster, partition, isolation, want) {
  const got = await cluster.fetchAll(partition, isolation);
  const key = ([o, v]) => `${o}:${v}`;
  const gotKeys = got.map(key);
  const wantKeys = want.map(key);
  if (gotKeys.join('\n') !== wantKeys.join('\n')) {
    const missing = wantKeys.filter((k) => !gotKeys.includes(k));
    const extra = gotKeys.filter((k) => !wantKeys.includes(k));
    const dup = [...new Set(gotKeys.filter((k, i) => gotKeys.indexOf(k) !== i))];
    fail(`partition ${partition} (${isolation}): got ${got.length} records, want ${want.length}; ` +
      `missing [${missing.slice(0, 5)}], unexpected [${extra.slice(0, 5)}], duplicated [${dup.slice(0, 5)}]` +
      (missing.length || extra.length || dup.length ? '' : '; same records in another order'));
  }
  log(`partition ${partition} (${isolation}): ${got.length} records, each once, in order`);
}

function parseArgs(argv) {
  const args = {
    bootstrap: process.env.SLUICE_BOOTSTRAP || '127.0.0.1:9400',
    topic: null,
    replicationFactor: 1,
    protoDir: path.resolve(__dirname, '..', '..', 'proto'),
  };
  const flags = { '--bootstrap': 'bootstrap', '--topic': 'topic', '--replication-factor': 'replicationFactor', '--proto-dir': 'protoDir' };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-h' || argv[i] === '--help') {
      console.log('usage: node sluice_example.js [--bootstrap HOST:PORT] [--topic NAME] ' +
        '[--replication-factor N] [--proto-dir DIR]\n\n' +
        '  --bootstrap           any broker (default $SLUICE_BOOTSTRAP or 127.0.0.1:9400)\n' +
        '  --topic               topic to create (default: sluice-example-node-<random>)\n' +
        '  --replication-factor  of the topic (default 1)\n' +
        '  --proto-dir           directory holding sluice/v1/*.proto (default: the repository\'s proto/)');
      process.exit(0);
    }
    const [flag, inline] = argv[i].split(/=(.*)/s);
    if (!(flag in flags)) fail(`unknown argument ${argv[i]} (--help lists them)`);
    const value = inline !== undefined ? inline : argv[++i];
    if (value === undefined) fail(`${flag} needs a value`);
    args[flags[flag]] = value;
  }
  args.replicationFactor = Number(args.replicationFactor);
  if (!Number.isInteger(args.replicationFactor)) fail('--replication-factor must be an integer');
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  ({ grpc, sluice, errorCodes } = loadProtos(args.protoDir));

  const suffix = crypto.randomBytes(4).toString('hex');
  const topic = args.topic || `sluice-example-node-${suffix}`;
  const partitions = 2;
  const cluster = new Cluster(args.bootstrap, topic);
  try {
    await cluster.createTopic(partitions, args.replicationFactor);
    await cluster.refreshLeaders(partitions);
    log(`topic ${topic}: leaders ${[...cluster.leaders].sort().map(([p, a]) => `${p}: ${a}`).join(', ')}`);

    const committed = Array.from({ length: partitions }, () => []);
    await idempotentProduce(cluster, partitions, committed);
    const everything = committed.map((w) => [...w]);

    const txn = new Transactor(cluster, `sluice-example-node-${suffix}`);
    await txn.init();
    log(`transactional id ${txn.id}: coordinator ${txn.coordinator}, producer id ${txn.pid}, epoch ${txn.epoch}`);
    for (const [label, commit] of [['txn1-commit', true], ['txn2-abort', false], ['txn3-commit', true]]) {
      for (const [p, w] of await txn.run(partitions, label, commit)) {
        everything[p].push(...w);
        if (commit) committed[p].push(...w);
      }
    }

    for (let p = 0; p < partitions; p++) {
      // read_uncommitted shows the aborted records are in the log...
      await check(cluster, p, 'ISOLATION_LEVEL_READ_UNCOMMITTED', everything[p]);
      // ...and read_committed never returns them.
      await check(cluster, p, 'ISOLATION_LEVEL_READ_COMMITTED', committed[p]);
    }
  } finally {
    cluster.close();
  }
  log('OK');
}

main().catch((e) => {
  console.error(`${NAME}: FAIL: ${e instanceof Failure ? e.message : (e && e.stack) || e}`);
  process.exit(1);
});
