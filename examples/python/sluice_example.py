#!/usr/bin/env python3
"""Sluice from Python, through the public gRPC API only.

Compiles proto/sluice/v1/*.proto at start (grpc_tools, into a temporary
directory: nothing generated is committed), then against a running broker:

  1. creates a topic with 2 partitions (Admin/CreateTopics) and waits for
     their leaders (Admin/Metadata); every produce and fetch goes to the
     partition's leader;
  2. produces idempotently (Transactions/InitProducerId, batches carrying
     the producer id, epoch and base sequence), sends one batch twice as a
     retry after a lost answer would, and checks that the retry is answered
     NONE with the original base offset;
  3. runs three transactions across both partitions (FindCoordinator,
     InitProducerId with a transactional id, produce with the
     transactional id, EndTxn): commit, abort, commit;
  4. fetches both partitions read_uncommitted (every record, the aborted
     ones included) and read_committed (no aborted record: the broker
     leaves them out; this program filters nothing) and checks that each
     record came back exactly once, in order, at the offset its produce
     answered.

Exits 0 when everything matched; otherwise prints what did not to stderr
and exits 1. See examples/README.md.

Needs Debian's python3-grpcio and python3-grpc-tools (run it with
/usr/bin/python3, the interpreter those packages install for).
"""

import argparse
import atexit
import glob
import os
import shutil
import sys
import tempfile
import time
import uuid

NAME = "python example"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# RecordBatch attribute bits (docs/record-format.md).
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

# Bounds of this program's waits.
RPC_TIMEOUT = 10.0  # one gRPC call, seconds
STEP_TIMEOUT = 30.0  # one step with its retries, seconds


class Failure(Exception):
    """A mismatch or an error that ends the run."""


def fail(msg):
    raise Failure(msg)


def log(msg):
    print(f"{NAME}: {msg}", flush=True)


def load_protos(proto_dir):
    """Compiles the public protos into a temporary directory and imports them.

    Returns (grpc, errors_pb2, record_pb2, sluice_pb2, sluice_pb2_grpc,
    transactions_pb2, transactions_pb2_grpc).
    """
    try:
        import grpc
    except ImportError as e:
        fail(f"cannot import grpc ({e}): install Debian's python3-grpcio "
             f"(apt-get install python3-grpcio) and run this with /usr/bin/python3")
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError as e:
        fail(f"cannot import grpc_tools ({e}): install Debian's python3-grpc-tools "
             f"(apt-get install python3-grpc-tools) and run this with /usr/bin/python3")
    out = tempfile.mkdtemp(prefix="sluice-example-python-")
    atexit.register(shutil.rmtree, out, True)
    files = sorted(os.path.relpath(f, proto_dir)
                   for f in glob.glob(os.path.join(proto_dir, "sluice", "v1", "*.proto")))
    if not files:
        fail(f"no .proto files under {proto_dir}/sluice/v1 (--proto-dir)")
    # grpc_tools ships google/protobuf/*.proto (errors.proto imports
    # descriptor.proto) in its _proto directory.
    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"-I{wkt}",
                      f"--python_out={out}", f"--grpc_python_out={out}"] + files)
    if rc != 0:
        fail(f"compiling {', '.join(files)} from {proto_dir} failed (grpc_tools.protoc exit {rc})")
    sys.path.insert(0, out)
    from sluice.v1 import (errors_pb2, record_pb2, sluice_pb2, sluice_pb2_grpc,
                           transactions_pb2, transactions_pb2_grpc)
    return (grpc, errors_pb2, record_pb2, sluice_pb2, sluice_pb2_grpc,
            transactions_pb2, transactions_pb2_grpc)


# Set by main from load_protos: the modules exist only once --proto-dir
# is compiled.
(grpc, errors_pb2, record_pb2, sluice_pb2, sluice_pb2_grpc,
 transactions_pb2, transactions_pb2_grpc) = (None,) * 7

NONE = 0


def code_name(code):
    try:
        return errors_pb2.ErrorCode.Name(code)
    except ValueError:
        return f"error code {code}"


def retriable(code):
    """Whether the broker says code may succeed when sent again: the
    (sluice.v1.retriable) option on the ErrorCode value (errors.proto)."""
    value = errors_pb2.ErrorCode.DESCRIPTOR.values_by_number.get(code)
    return value is not None and value.GetOptions().Extensions[errors_pb2.retriable]


def retry(what, attempt, on_retriable=None):
    """Calls attempt() until it succeeds, retrying retriable answers.

    attempt returns (error_code, error_message, result). A retriable code,
    or a gRPC UNAVAILABLE or DEADLINE_EXCEEDED status, is retried after a
    pause (50 ms doubling to 1 s) for up to STEP_TIMEOUT, calling
    on_retriable(code) first (e.g. to look the leader up again); any other
    code or status fails the run.
    """
    deadline = time.monotonic() + STEP_TIMEOUT
    delay = 0.05
    while True:
        try:
            code, msg, result = attempt()
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                fail(f"{what}: gRPC {e.code().name}: {e.details()}")
            code, msg, result = None, f"gRPC {e.code().name}: {e.details()}", None
        if code == NONE:
            return result
        if code is not None and not retriable(code):
            fail(f"{what}: {code_name(code)}: {msg}")
        if time.monotonic() + delay > deadline:
            fail(f"{what}: still failing after {STEP_TIMEOUT:.0f} s: "
                 f"{code_name(code) + ': ' if code is not None else ''}{msg}")
        if on_retriable is not None and code is not None:
            on_retriable(code)
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


class Cluster:
    """Connections to the brokers, the partition leaders of one topic and
    the coordinator of one transactional id."""

    def __init__(self, bootstrap, topic):
        self.bootstrap = bootstrap
        self.topic = topic
        self.channels = {}
        self.leaders = {}  # partition -> leader's address

    def channel(self, addr):
        if addr not in self.channels:
            self.channels[addr] = grpc.insecure_channel(addr)
        return self.channels[addr]

    def admin(self, addr=None):
        return sluice_pb2_grpc.AdminStub(self.channel(addr or self.bootstrap))

    def log_service(self, addr):
        return sluice_pb2_grpc.LogStub(self.channel(addr))

    def transactions(self, addr=None):
        return transactions_pb2_grpc.TransactionsStub(self.channel(addr or self.bootstrap))

    def close(self):
        for ch in self.channels.values():
            ch.close()

    def create_topic(self, partitions, replication_factor):
        req = sluice_pb2.CreateTopicsRequest(
            topics=[sluice_pb2.CreatableTopic(name=self.topic, num_partitions=partitions,
                                              replication_factor=replication_factor)],
            timeout_ms=int(RPC_TIMEOUT * 1000))

        def attempt():
            r = self.admin().CreateTopics(req, timeout=RPC_TIMEOUT).topics[0]
            return r.error_code, r.error_message, None
        retry(f"CreateTopics {self.topic}", attempt)

    def refresh_leaders(self, partitions):
        """Waits until Metadata names a leader for every partition and
        records each leader's address."""
        def attempt():
            md = self.admin().Metadata(sluice_pb2.MetadataRequest(topics=[self.topic]),
                                       timeout=RPC_TIMEOUT)
            brokers = {b.node_id: b.address for b in md.brokers}
            t = next((t for t in md.topics if t.name == self.topic), None)
            if t is None:
                return errors_pb2.UNKNOWN_TOPIC_OR_PARTITION, "not in the metadata yet", None
            if t.error_code != NONE:
                return t.error_code, t.error_message, None
            leaders = {p.partition: brokers.get(p.leader_id) for p in t.partitions}
            for p in range(partitions):
                if leaders.get(p) is None:
                    return errors_pb2.LEADER_NOT_AVAILABLE, f"partition {p} has no leader yet", None
            return NONE, "", leaders
        self.leaders = retry(f"Metadata {self.topic}", attempt)

    def on_partition_error(self, code):
        if code in (errors_pb2.NOT_LEADER_OR_FOLLOWER, errors_pb2.LEADER_NOT_AVAILABLE,
                    errors_pb2.UNKNOWN_TOPIC_OR_PARTITION, errors_pb2.FENCED_LEADER_EPOCH,
                    errors_pb2.UNKNOWN_LEADER_EPOCH, errors_pb2.NEW_LEADER_ELECTED):
            self.refresh_leaders(len(self.leaders))

    def produce(self, partition, batch, transactional_id=""):
        """Sends batch to the partition's leader with acks=all, retrying
        retriable answers with the same batch (the broker deduplicates by
        producer id, epoch and sequence); returns the base offset."""
        req = sluice_pb2.ProduceRequest(
            transactional_id=transactional_id, acks=sluice_pb2.ACKS_ALL,
            timeout_ms=int(RPC_TIMEOUT * 1000),
            topics=[sluice_pb2.TopicProduceData(name=self.topic, partitions=[
                sluice_pb2.PartitionProduceData(partition=partition, batch=batch)])])

        def attempt():
            resp = self.log_service(self.leaders[partition]).Produce(req, timeout=RPC_TIMEOUT)
            p = resp.topics[0].partitions[0]
            return p.error_code, p.error_message, p.base_offset
        return retry(f"Produce {self.topic}-{partition}", attempt, self.on_partition_error)

    def fetch_all(self, partition, isolation):
        """Reads the partition from offset 0 to its end with the isolation
        level, starting each fetch at the previous answer's
        next_fetch_offset; returns [(offset, key, value)].

        The end: read_uncommitted, the high watermark; read_committed, the
        high watermark once the last stable offset has reached it (every
        transaction's markers written)."""
        offset = 0
        out = []
        deadline = time.monotonic() + STEP_TIMEOUT
        read_committed = isolation == sluice_pb2.ISOLATION_LEVEL_READ_COMMITTED
        while True:
            req = sluice_pb2.FetchRequest(
                max_wait_ms=200, isolation_level=isolation,
                topics=[sluice_pb2.FetchTopic(name=self.topic, partitions=[
                    sluice_pb2.FetchPartition(partition=partition, fetch_offset=offset,
                                              current_leader_epoch=-1)])])

            def attempt():
                resp = self.log_service(self.leaders[partition]).Fetch(req, timeout=RPC_TIMEOUT)
                p = resp.topics[0].partitions[0]
                return p.error_code, p.error_message, p
            p = retry(f"Fetch {self.topic}-{partition} at {offset}", attempt, self.on_partition_error)
            for b in p.batches:
                if b.attributes & ATTR_CONTROL:
                    fail(f"Fetch {self.topic}-{partition}: got a control batch at {b.base_offset}; "
                         f"consumers must never see markers")
                for r in b.records:
                    o = b.base_offset + r.offset_delta
                    if o >= offset:  # the first batch may start before fetch_offset
                        out.append((o, r.key, r.value))
            if p.next_fetch_offset < offset:
                fail(f"Fetch {self.topic}-{partition}: next_fetch_offset {p.next_fetch_offset} "
                     f"is behind fetch_offset {offset}")
            offset = p.next_fetch_offset
            if offset >= p.high_watermark and (not read_committed or
                                               p.last_stable_offset >= p.high_watermark):
                return out
            if time.monotonic() > deadline:
                fail(f"Fetch {self.topic}-{partition}: not at the end after {STEP_TIMEOUT:.0f} s "
                     f"(next offset {offset}, high watermark {p.high_watermark}, "
                     f"last stable offset {p.last_stable_offset})")


def make_batch(values, producer_id, producer_epoch, base_sequence, transactional=False):
    """A RecordBatch of values as a producer sends it (docs/record-format.md):
    crc 0 (the broker computes it), record_count and last_offset_delta from
    the records, record i at offset_delta i."""
    records = [record_pb2.Record(timestamp_delta=0, offset_delta=i, key=b"k", value=v)
               for i, v in enumerate(values)]
    return record_pb2.RecordBatch(
        crc=0, attributes=ATTR_TRANSACTIONAL if transactional else 0,
        last_offset_delta=len(records) - 1, base_timestamp=int(time.time() * 1000),
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        record_count=len(records), records=records)


def init_producer_id(cluster, transactional_id="", addr=None, timeout_ms=0):
    req = transactions_pb2.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=timeout_ms,
        producer_id=-1, producer_epoch=-1)

    def attempt():
        r = cluster.transactions(addr).InitProducerId(req, timeout=RPC_TIMEOUT)
        return r.error_code, r.error_message, (r.producer_id, r.producer_epoch)
    return retry(f"InitProducerId {transactional_id!r}", attempt)


def idempotent_produce(cluster, partitions, expected):
    """Two batches per partition from an idempotent producer, the first sent
    twice; appends (offset, value) of each record to expected[partition]."""
    pid, epoch = init_producer_id(cluster)
    log(f"idempotent producer: id {pid}, epoch {epoch}")
    for p in range(partitions):
        first = [f"idempotent-p{p}-{i}".encode() for i in range(3)]
        second = [f"idempotent-p{p}-{i}".encode() for i in range(3, 5)]
        a = make_batch(first, pid, epoch, 0)
        off_a = cluster.produce(p, a)
        # A retry after a lost answer: the same batch (same sequence) again.
        off_retry = cluster.produce(p, a)
        if off_retry != off_a:
            fail(f"partition {p}: the duplicate of the batch at offset {off_a} was answered "
                 f"with offset {off_retry}; want the original offset {off_a}")
        off_b = cluster.produce(p, make_batch(second, pid, epoch, len(first)))
        if off_b != off_a + len(first):
            fail(f"partition {p}: the batch after the duplicate landed at {off_b}, want "
                 f"{off_a + len(first)} (the duplicate must not have been appended)")
        log(f"partition {p}: batch at {off_a}, its duplicate answered NONE with {off_retry}, "
            f"next batch at {off_b}")
        expected[p] += [(off_a + i, v) for i, v in enumerate(first)]
        expected[p] += [(off_b + i, v) for i, v in enumerate(second)]


class Transactor:
    """A transactional producer driving TV2 by hand (docs/transactions.md,
    "Driving the protocol from any language")."""

    def __init__(self, cluster, transactional_id):
        self.cluster = cluster
        self.id = transactional_id
        self.find_coordinator()
        self.pid, self.epoch = init_producer_id(cluster, self.id, self.coordinator, 30000)

    def find_coordinator(self):
        req = transactions_pb2.FindCoordinatorRequest(
            key_type=transactions_pb2.COORDINATOR_KEY_TYPE_TRANSACTION, keys=[self.id])

        def attempt():
            c = self.cluster.transactions().FindCoordinator(req, timeout=RPC_TIMEOUT).coordinators[0]
            return c.error_code, c.error_message, c.address
        self.coordinator = retry(f"FindCoordinator {self.id}", attempt)

    def run(self, partitions, label, commit):
        """One transaction writing 2 records to every partition, then EndTxn;
        returns {partition: [(offset, value)]}."""
        written = {}
        for p in range(partitions):
            values = [f"{label}-p{p}-{i}".encode() for i in range(2)]
            # Sequences restart at 0 in every epoch, and TV2 bumps the
            # epoch at every EndTxn.
            off = self.cluster.produce(p, make_batch(values, self.pid, self.epoch, 0, True), self.id)
            written[p] = [(off + i, v) for i, v in enumerate(values)]
        req = transactions_pb2.EndTxnRequest(transactional_id=self.id, producer_id=self.pid,
                                              producer_epoch=self.epoch, committed=commit)

        def attempt():
            r = self.cluster.transactions(self.coordinator).EndTxn(req, timeout=RPC_TIMEOUT)
            return r.error_code, r.error_message, (r.producer_id, r.producer_epoch)

        def on_retriable(code):
            if code in (errors_pb2.NOT_COORDINATOR, errors_pb2.COORDINATOR_NOT_AVAILABLE):
                self.find_coordinator()
        self.pid, self.epoch = retry(f"EndTxn {'commit' if commit else 'abort'} {self.id}",
                                     attempt, on_retriable)
        log(f"transaction {label}: {'committed' if commit else 'aborted'} "
            f"({', '.join(f'partition {p} at {w[0][0]}' for p, w in written.items())}); "
            f"next epoch {self.epoch}")
        return written


def check(cluster, partition, isolation, want):
    """Fetches the partition with the isolation level and compares it with
    want, [(offset, value)] in offset order: every record exactly once, in
    order, at its offset."""
    got = [(o, v) for o, _, v in cluster.fetch_all(partition, isolation)]
    level = sluice_pb2.IsolationLevel.Name(isolation)
    if got != want:
        extra = [x for x in got if x not in want]
        missing = [x for x in want if x not in got]
        dup = sorted({x for x in got if got.count(x) > 1})
        fail(f"partition {partition} ({level}): got {len(got)} records, want {len(want)}; "
             f"missing {missing[:5]}, unexpected {extra[:5]}, duplicated {dup[:5]}"
             + ("" if missing or extra or dup else "; same records in another order"))
    log(f"partition {partition} ({level}): {len(got)} records, each once, in order")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("SLUICE_BOOTSTRAP", "127.0.0.1:9400"),
                    help="host:port of any broker (default $SLUICE_BOOTSTRAP or 127.0.0.1:9400)")
    ap.add_argument("--topic", default=None,
                    help="topic to create (default: sluice-example-python-<random>)")
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--proto-dir", default=os.path.join(REPO, "proto"),
                    help="directory holding sluice/v1/*.proto (default: the repository's proto/)")
    args = ap.parse_args()

    global grpc, errors_pb2, record_pb2, sluice_pb2, sluice_pb2_grpc
    global transactions_pb2, transactions_pb2_grpc
    (grpc, errors_pb2, record_pb2, sluice_pb2, sluice_pb2_grpc,
     transactions_pb2, transactions_pb2_grpc) = load_protos(args.proto_dir)

    suffix = uuid.uuid4().hex[:8]
    topic = args.topic or f"sluice-example-python-{suffix}"
    partitions = 2
    cluster = Cluster(args.bootstrap, topic)
    try:
        cluster.create_topic(partitions, args.replication_factor)
        cluster.refresh_leaders(partitions)
        log(f"topic {topic}: leaders " + ", ".join(f"{p}: {a}" for p, a in sorted(cluster.leaders.items())))

        committed = {p: [] for p in range(partitions)}
        idempotent_produce(cluster, partitions, committed)
        everything = {p: list(w) for p, w in committed.items()}

        txn = Transactor(cluster, f"sluice-example-python-{suffix}")
        log(f"transactional id {txn.id}: coordinator {txn.coordinator}, "
            f"producer id {txn.pid}, epoch {txn.epoch}")
        for label, commit in (("txn1-commit", True), ("txn2-abort", False), ("txn3-commit", True)):
            for p, w in txn.run(partitions, label, commit).items():
                everything[p] += w
                if commit:
                    committed[p] += w

        for p in range(partitions):
            # read_uncommitted shows the aborted records are in the log...
            check(cluster, p, sluice_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED, everything[p])
            # ...and read_committed never returns them.
            check(cluster, p, sluice_pb2.ISOLATION_LEVEL_READ_COMMITTED, committed[p])
    finally:
        cluster.close()
    log("OK")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"{NAME}: FAIL: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
