#!/usr/bin/env python3
"""Sluice's Kafka listener from Python, with confluent-kafka (librdkafka).

No Sluice code: Debian's python3-confluent-kafka, which wraps Debian's
librdkafka, against a running broker's Kafka address (sluiced
--kafka-listen). It

  1. creates a topic (AdminClient.create_topics: CreateTopics) and waits
     until Metadata names a leader for every partition and the replication
     factor asked for;
  2. for each compression codec (compression.type none, gzip, snappy, lz4,
     zstd) produces with an idempotent producer (enable.idempotence=true:
     InitProducerId, acks=all) records spread over the partitions: keys,
     a null key, a null and an empty value, binary bytes, headers (repeated
     keys, a null value), explicit CreateTime timestamps; every delivery
     report must carry no error, and librdkafka's own log must show each
     batch sent with the codec asked for and a producer id;
  3. reads every partition back from the beginning with a consumer in a
     consumer group (subscribe(): FindCoordinator, JoinGroup, SyncGroup,
     Heartbeat; enable.auto.commit=false), and checks that each record
     came back exactly once, in order, at the offset its delivery report
     gave, with the same key, value, headers and timestamp; ListOffsets
     (watermarks) must agree; it commits its positions (commit(), an
     OffsetCommit), which committed() (OffsetFetch) must give as the
     partitions' ends, and leaves the group (close(): LeaveGroup);
  4. deletes the topic (DeleteTopics) and checks that Metadata no longer
     lists it.

Exits 0 when everything matched; otherwise prints what did not to stderr
and exits 1. See examples/kafka/README.md.

Run it with /usr/bin/python3, the interpreter Debian's packages install
for.
"""

import argparse
import collections
import logging
import os
import sys
import time
import uuid

NAME = "confluent-kafka"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

# Codecs allowed to go out uncompressed: none (librdkafka 2.0.2 compresses
# lz4 only when the broker's ApiVersions lists FindCoordinator, as Sluice's
# does).
DEFAULT_ALLOW_UNCOMPRESSED = ""

STEP_TIMEOUT = 30.0  # one step with its retries, seconds


class Failure(Exception):
    """A mismatch or an error that ends the run."""


def fail(msg):
    raise Failure(msg)


# Mismatches that do not stop the run (a codec that did not go on the
# wire): reported as they happen and fail it at the end, so one run shows
# every one of them.
problems = []


def problem(msg):
    problems.append(msg)
    print(f"{NAME}: FAILED: {msg}", file=sys.stderr, flush=True)


def log(msg):
    print(f"{NAME}: {msg}", flush=True)


def import_client():
    try:
        import confluent_kafka
    except ImportError as e:
        fail(f"cannot import confluent_kafka ({e}): install Debian's python3-confluent-kafka "
             f"(apt-get install python3-confluent-kafka) and run this with /usr/bin/python3")
    return confluent_kafka


class Counted(logging.Handler):
    """Counts librdkafka's log lines (a consumer repeats its errors every
    fetch), to name the commonest when a step fails."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = collections.Counter()

    def emit(self, record):
        self.lines[record.getMessage()] += 1

    def top(self, n=3):
        return "; ".join(f"{k} (x{c})" for k, c in self.lines.most_common(n)) or "nothing logged"


def quiet_logger(name, handler):
    logger = logging.getLogger(name)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(handler)
    return logger


class WireLog(logging.Handler):
    """Keeps librdkafka's "Produce MessageSet" debug lines (debug=msg):
    each names the batch's producer id and the codec it went out with."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.batches = []  # (pid text, codec text)
        self.notices = []

    def emit(self, record):
        msg = record.getMessage()
        if "Produce MessageSet with" in msg:
            # "... (N bytes, ApiVersion 7, MsgVersion 2, MsgId 1, BaseSeq 0, PID{Id:1,Epoch:0}, zstd)"
            inner = msg[msg.rfind("(") + 1:msg.rfind(")")]
            parts = [p.strip() for p in inner.split(",")]
            codec = parts[-1]
            pid = next((p for p in parts if p.startswith("PID{")), "")
            if pid.startswith("PID{Id:"):
                pid = msg[msg.find("PID{"):msg.find("}", msg.find("PID{")) + 1]
            self.batches.append((pid, codec))
        elif "compression" in msg.lower():
            self.notices.append(msg)


def record_for(codec, i, partitions, base_ts):
    """The i-th record produced with codec: (partition, key, value, headers, timestamp)."""
    partition = i % partitions
    key = f"{codec}-key-{i}".encode()
    # Compressible, so that librdkafka does not send a batch uncompressed
    # because compressing did not make it smaller.
    value = f"{codec} record {i} ".encode() + b"sluice " * 40
    headers = [("codec", codec.encode()), ("i", str(i).encode())]
    if i == 0:
        key = None
    elif i == 1:
        value = None
    elif i == 2:
        value = b""
        headers = []
    elif i == 3:
        value = bytes(range(256))
        headers = [("dup", b"1"), ("dup", b"2"), ("null", None), ("empty", b"")]
    return partition, key, value, headers, base_ts + i


def create_topic(ck, admin, topic, partitions, rf):
    from confluent_kafka.admin import NewTopic
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf)],
                                  operation_timeout=STEP_TIMEOUT, request_timeout=STEP_TIMEOUT)
    try:
        futures[topic].result(timeout=STEP_TIMEOUT)
    except Exception as e:
        fail(f"CreateTopics {topic}: {e}")
    deadline = time.time() + STEP_TIMEOUT
    while True:
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        ok = (t is not None and t.error is None and len(t.partitions) == partitions and
              all(p.leader >= 0 and len(p.replicas) == rf and len(p.isrs) == rf for p in t.partitions.values()))
        if ok:
            leaders = sorted({p.leader for p in t.partitions.values()})
            log(f"created {topic}: {partitions} partitions, replication factor {rf}, leaders on brokers {leaders} "
                f"(cluster of {len(md.brokers)} brokers)")
            return
        if time.time() > deadline:
            fail(f"Metadata for {topic} after {STEP_TIMEOUT:.0f} s: {t and t.error} "
                 f"{t and {p.id: (p.leader, p.replicas, p.isrs) for p in t.partitions.values()}}")
        time.sleep(0.2)


def produce(ck, bootstrap, topic, codec, n, partitions, base_ts, allow_uncompressed):
    """Produces n records with codec; returns {(partition, offset): record}."""
    wire = WireLog()
    logger = quiet_logger(f"librdkafka.producer.{codec}", wire)
    p = ck.Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": codec,
        "linger.ms": 20,
        "message.timeout.ms": int(STEP_TIMEOUT * 1000),
        "debug": "msg",
    }, logger=logger)
    delivered = {}
    errors = []

    def report(err, msg, rec):
        if err is not None:
            errors.append(f"record {rec[0]}: {err}")
            return
        if msg.partition() != rec[1][0]:
            errors.append(f"record {rec[0]} delivered to partition {msg.partition()}, not {rec[1][0]}")
        delivered[(msg.partition(), msg.offset())] = rec

    for i in range(n):
        rec = record_for(codec, i, partitions, base_ts)
        part, key, value, headers, ts = rec
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=part, headers=headers, timestamp=ts,
                          on_delivery=lambda err, msg, rec=(i, rec): report(err, msg, rec))
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(STEP_TIMEOUT)
    if left:
        fail(f"{codec}: {left} records not delivered after {STEP_TIMEOUT:.0f} s")
    if errors:
        fail(f"{codec}: delivery reports with errors: {errors[:5]}")
    if len(delivered) != n:
        fail(f"{codec}: {len(delivered)} distinct (partition, offset) pairs for {n} records")

    # What went on the wire, by librdkafka's own account.
    if not wire.batches:
        fail(f"{codec}: librdkafka logged no Produce MessageSet (debug=msg)")
    sent = {c for _, c in wire.batches}
    want = "uncompressed" if codec == "none" else codec
    if sent != {want}:
        if codec in allow_uncompressed and sent == {"uncompressed"}:
            log(f"{codec}: librdkafka sent the batches uncompressed (allowed: --allow-uncompressed; "
                f"{'; '.join(wire.notices[:1]) or 'no notice'})")
        else:
            problem(f"{codec}: batches went out as {sorted(sent)}, not {want}: {'; '.join(wire.notices[:1])}")
    pids = {pid for pid, _ in wire.batches}
    if any(not pid.startswith("PID{Id:") for pid in pids) or len(pids) != 1:
        fail(f"{codec}: batches carried producer ids {sorted(pids)}: not one idempotent producer")
    log(f"{codec}: {n} records in {len(wire.batches)} batches, sent {sorted(sent)[0]}, "
        f"idempotent {next(iter(pids))}")
    return delivered


def consume(ck, bootstrap, topic, partitions, expected):
    """Reads every partition from the beginning in a new consumer group
    (subscribe), checks it against expected, commits and checks the
    committed offsets."""
    from confluent_kafka import TopicPartition, KafkaError, TIMESTAMP_CREATE_TIME
    logs = Counted()
    group = f"sluice-example-{uuid.uuid4().hex[:8]}"
    assigned = []
    c = ck.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # A new group has no committed offsets: start at the beginning.
        "auto.offset.reset": "earliest",
        # The broker's minimum session; heartbeats every second.
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    }, logger=quiet_logger("librdkafka.consumer", logs))
    try:
        c.subscribe([topic], on_assign=lambda _c, tps: assigned.extend(tp.partition for tp in tps))
        counts = {p: sum(1 for (pp, _) in expected if pp == p) for p in range(partitions)}
        next_offset = {p: 0 for p in range(partitions)}
        eof = set()
        deadline = time.time() + STEP_TIMEOUT
        while len(eof) < partitions:
            if time.time() > deadline:
                fail(f"consume: after {STEP_TIMEOUT:.0f} s at offsets {next_offset} of {counts}, end reached on "
                     f"partitions {sorted(eof)}, assigned {sorted(assigned)}; librdkafka logged: {logs.top()}")
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if next_offset[m.partition()] == counts[m.partition()]:
                        eof.add(m.partition())
                    continue
                fail(f"consume: {m.error()}; librdkafka logged: {logs.top()}")
            p, off = m.partition(), m.offset()
            if off != next_offset[p]:
                fail(f"consume: partition {p} gave offset {off}, expected {next_offset[p]} (in order, each once)")
            next_offset[p] = off + 1
            rec = expected.get((p, off))
            if rec is None:
                fail(f"consume: partition {p} offset {off} was never produced")
            i, (_, key, value, headers, ts) = rec
            got_headers = m.headers() or []
            if m.key() != key or m.value() != value or got_headers != headers:
                fail(f"consume: partition {p} offset {off} (record {i}): got key {m.key()!r} value {m.value()!r:.80} "
                     f"headers {got_headers!r}, produced key {key!r} value {value!r:.80} headers {headers!r}")
            if m.timestamp() != (TIMESTAMP_CREATE_TIME, ts):
                fail(f"consume: partition {p} offset {off}: timestamp {m.timestamp()}, produced CreateTime {ts}")
        if next_offset != counts:
            fail(f"consume: read up to {next_offset}, produced {counts}")
        if sorted(assigned) != list(range(partitions)):
            fail(f"consume: the group assigned partitions {sorted(assigned)}, expected all {partitions}")
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if (lo, hi) != (0, counts[p]):
                fail(f"ListOffsets: partition {p} watermarks {(lo, hi)}, expected {(0, counts[p])}")
        # The positions (the next offsets to read) are the ends; commit them.
        positions = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in range(partitions)])}
        if positions != counts:
            fail(f"consume: positions {positions}, expected the ends {counts}")
        try:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
        except Exception as e:
            fail(f"commit: {e}; librdkafka logged: {logs.top()}")
        committed = {tp.partition: (tp.offset, tp.error) for tp in
                     c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=STEP_TIMEOUT)}
        if committed != {p: (o, None) for p, o in counts.items()}:
            fail(f"committed(): {committed}, expected the ends {counts}")
        log(f"consumed {sum(counts.values())} records from {partitions} partitions in group {group} (subscribe()): "
            f"every record once, in order, key, value, headers and timestamp as produced; watermarks agree; "
            f"committed {counts}, as committed() reads them")
    finally:
        c.close()


def delete_topic(admin, topic):
    futures = admin.delete_topics([topic], operation_timeout=STEP_TIMEOUT, request_timeout=STEP_TIMEOUT)
    try:
        futures[topic].result(timeout=STEP_TIMEOUT)
    except Exception as e:
        fail(f"DeleteTopics {topic}: {e}")
    deadline = time.time() + STEP_TIMEOUT
    while True:
        md = admin.list_topics(timeout=10)
        if topic not in md.topics:
            log(f"deleted {topic}")
            return
        if time.time() > deadline:
            fail(f"{topic} still listed {STEP_TIMEOUT:.0f} s after DeleteTopics")
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("SLUICE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                    help="a broker's Kafka address (default $SLUICE_KAFKA_BOOTSTRAP or 127.0.0.1:9092)")
    ap.add_argument("--topic", default="", help="topic to create (default a fresh random name; must not exist)")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--records", type=int, default=20, help="records per codec (at least 4)")
    ap.add_argument("--codecs", default=",".join(CODECS), help="compression.type values, comma separated")
    ap.add_argument("--allow-uncompressed", default=DEFAULT_ALLOW_UNCOMPRESSED,
                    help="codecs librdkafka may send uncompressed without failing (default %(default)s: "
                         "librdkafka 2.0.2 compresses lz4 only when the broker lists FindCoordinator)")
    args = ap.parse_args()
    if args.records < 4:
        ap.error("--records must be at least 4")
    codecs = [c for c in args.codecs.split(",") if c]
    allow = {c for c in args.allow_uncompressed.split(",") if c}
    topic = args.topic or f"confluent-kafka-{uuid.uuid4().hex[:12]}"

    ck = import_client()
    log(f"confluent-kafka {ck.version()[0]}, librdkafka {ck.libversion()[0]}, against {args.bootstrap}")
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    create_topic(ck, admin, topic, args.partitions, args.replication_factor)
    expected = {}
    base_ts = int(time.time() * 1000) - 60_000
    for n, codec in enumerate(codecs):
        got = produce(ck, args.bootstrap, topic, codec, args.records, args.partitions, base_ts + 1000 * n, allow)
        overlap = expected.keys() & got.keys()
        if overlap:
            fail(f"{codec}: offsets delivered twice: {sorted(overlap)[:5]}")
        expected.update(got)
    consume(ck, args.bootstrap, topic, args.partitions, expected)
    delete_topic(admin, topic)
    if problems:
        fail(f"{len(problems)} check(s) failed (above)")
    log("all checks passed")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"{NAME}: FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
