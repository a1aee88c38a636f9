#!/usr/bin/env python3
"""A transactional copier over Sluice's Kafka listener, with confluent-kafka.

Reads an input topic as a member of a classic consumer group and copies
each record to an output topic, exactly once: the copies and the group's
new positions are committed in one transaction (transaction version 1, as
librdkafka speaks it: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn). No Sluice code: Debian's python3-confluent-kafka
(librdkafka). Run it with /usr/bin/python3.

Usage (a stable interface: other harnesses run this program):

  txn_copier.py --bootstrap HOST:PORT[,HOST:PORT...] --input TOPIC
                --output TOPIC --group GROUP --transactional-id ID
                [--until-end | --until-offsets P:O[,P:O...]]
                [--until-idle SECONDS] [--max-batch N] [--pace-ms MS]
                [--transaction-timeout-ms MS] [--session-timeout-ms MS]
                [--ca-file PEM] [--sasl-mechanism MECHANISM
                 --sasl-username USER --sasl-password-file FILE]
                [--debug CONTEXTS]

The copy of input record (partition P, offset O, key K, value V, headers H)
goes to the output's partition P with key K, value b"copy:" + V (a null
value stays null; V is the copy's value minus its first 5 bytes) and
headers H plus ("copied-from", b"TOPIC/P/O").

Stopping (any that is given; without one it runs until SIGTERM or SIGINT):
  --until-end            the group's committed offsets reach the input's
                         ends as read when the program starts (every
                         partition, whichever member copied it: each
                         member stops once the whole group is done);
  --until-offsets P:O,.. the same with the given ends;
  --until-idle SECONDS   nothing consumed for that long.
SIGTERM or SIGINT: the transaction under way is committed (or aborted),
the consumer leaves the group, and the program exits 0.

stdout: one JSON line per committed transaction, nothing else:
  {"txn": N, "transactional_id": ID, "records": K,
   "copied": {"P": [FIRST, LAST], ...}, "positions": {"P": NEXT, ...}}
N counts this process's committed transactions from 1; "copied" names the
input offsets copied in it (FIRST..LAST, inclusive, per partition);
"positions" are the offsets committed for the group with it.
stderr: progress (assignments, aborts, the reason for exiting).

--max-batch (100): records per transaction at most. --pace-ms (0): after a
transaction's records are sent (flushed), wait this long before committing
it, widening the window in which a killed copier leaves an open
transaction (for tests). --transaction-timeout-ms (60000): librdkafka's
transaction.timeout.ms, after which the coordinator aborts a transaction
a dead copier left open. --session-timeout-ms (6000): the group session,
after which a dead member's partitions go to others. --debug: librdkafka
debug contexts (e.g. protocol,cgrp,eos,broker) for both clients, on stderr.

A secured cluster (docs/security.md): --ca-file connects with TLS
(security.protocol SSL), trusting the CA in that PEM file and checking the
broker's certificate against the address dialed; --sasl-mechanism
(SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN) with --sasl-username and
--sasl-password-file authenticates as that user (SASL_SSL with --ca-file,
else SASL_PLAINTEXT), the password read from the file (one line; never on
the command line). Both clients, the consumer and the producer, use them.
librdkafka before 2.6.1 (Debian bookworm's is 2.0.2) repeats its own nonce
in SCRAM's final message (confluentinc/librdkafka#4895): Kafka 4 refuses
it, Sluice accepts that form. PLAIN works too, with --ca-file: Sluice
checks a PLAIN password against the user's SCRAM credentials, and offers
PLAIN on TLS connections only.

Exit status: 0 stopped as asked; 1 an error; 2 bad usage; 3 fenced (a newer
producer with the same transactional id, or a fatal producer error).
"""

import argparse
import json
import logging
import signal
import sys
import time

STEP_TIMEOUT = 30.0  # one blocking call, seconds
RETRY_FOR = 120.0  # how long retriable errors are retried before giving up


class Fenced(Exception):
    """A fatal producer error: this copier's producer can do nothing more."""


def log(msg):
    print(f"txn_copier: {msg}", file=sys.stderr, flush=True)


def parse_ends(spec):
    ends = {}
    for part in spec.split(","):
        p, _, o = part.partition(":")
        ends[int(p)] = int(o)
    return ends


def security_config(args):
    """The librdkafka settings of --ca-file and --sasl-*: TLS trusting the
    CA, SASL as the user; {} for a plaintext cluster."""
    conf = {}
    if args.ca_file:
        conf["ssl.ca.location"] = args.ca_file
    if args.sasl_mechanism:
        with open(args.sasl_password_file, encoding="utf-8") as f:
            password = f.read().strip()
        conf.update({"sasl.mechanism": args.sasl_mechanism, "sasl.username": args.sasl_username,
                     "sasl.password": password})
    conf["security.protocol"] = {(False, False): "PLAINTEXT", (True, False): "SSL",
                                 (False, True): "SASL_PLAINTEXT", (True, True): "SASL_SSL"}[
        (bool(args.ca_file), bool(args.sasl_mechanism))]
    return conf


class Copier:
    def __init__(self, ck, args):
        self.ck = ck
        self.args = args
        self.stop = None  # the reason to stop, once there is one
        self.txns = 0
        self.assigned = set()
        logger = logging.getLogger("librdkafka")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("txn_copier: librdkafka: %(message)s"))
        logger.addHandler(handler)
        common = {"bootstrap.servers": args.bootstrap, **security_config(args)}
        if args.debug:
            common["debug"] = args.debug
        self.producer = ck.Producer({
            **common,
            "transactional.id": args.transactional_id,
            "enable.idempotence": True,
            "transaction.timeout.ms": args.transaction_timeout_ms,
            "linger.ms": 5,
        }, logger=logger)
        self.consumer = ck.Consumer({
            **common,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": max(100, args.session_timeout_ms // 6),
            "max.poll.interval.ms": max(60000, args.session_timeout_ms),
        }, logger=logger)

    # Errors. librdkafka classifies each: retriable (try the same call
    # again), txn_requires_abort (abort, rewind, go on), fatal (stop).
    def _error(self, e):
        return e.args[0] if e.args and isinstance(e.args[0], self.ck.KafkaError) else None

    def retry(self, what, fn):
        """Calls fn until it does not fail retriably (RETRY_FOR at most)."""
        deadline = time.time() + RETRY_FOR
        while True:
            try:
                return fn()
            except self.ck.KafkaException as e:
                err = self._error(e)
                if err is not None and err.fatal():
                    raise Fenced(f"{what}: {err}")
                if err is None or not err.retriable() or time.time() > deadline:
                    raise
                log(f"{what}: {err}; retrying")
                time.sleep(0.2)

    def on_assign(self, _consumer, tps):
        self.assigned = {tp.partition for tp in tps}
        log(f"assigned partitions {sorted(self.assigned)} of {self.args.input}")

    def on_revoke(self, _consumer, tps):
        log(f"revoked partitions {sorted(tp.partition for tp in tps)}")
        self.assigned = set()

    def rewind(self):
        """Seeks every assigned partition back to the group's committed
        offset (the beginning where there is none): the aborted
        transaction's records are copied again."""
        TopicPartition = self.ck.TopicPartition
        assignment = self.consumer.assignment()
        if not assignment:
            return
        committed = self.retry("committed", lambda: self.consumer.committed(assignment, timeout=STEP_TIMEOUT))
        for tp in committed:
            off = tp.offset if tp.offset >= 0 else self.ck.OFFSET_BEGINNING
            try:
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, off))
            except self.ck.KafkaException as e:
                # A partition not fetching yet: assigning it anew at the
                # offset does the same.
                log(f"seek {tp.partition} to {off}: {e}; assigning at the committed offsets instead")
                self.consumer.assign([TopicPartition(t.topic, t.partition, t.offset if t.offset >= 0 else self.ck.OFFSET_BEGINNING)
                                      for t in committed])
                break
        log(f"rewound to the committed offsets {({tp.partition: tp.offset for tp in committed})}")

    def abort(self, why):
        log(f"aborting the transaction: {why}")
        self.retry("abort_transaction", lambda: self.producer.abort_transaction(STEP_TIMEOUT))
        self.rewind()

    def copy(self, msgs):
        """Copies msgs in one transaction with the consumer's positions;
        returns the line to print once committed, or None if aborted."""
        TopicPartition = self.ck.TopicPartition
        copied = {}
        self.producer.begin_transaction()
        try:
            for m in msgs:
                p, o = m.partition(), m.offset()
                value = m.value()
                headers = list(m.headers() or []) + [("copied-from", f"{m.topic()}/{p}/{o}".encode())]
                while True:
                    try:
                        self.producer.produce(self.args.output, key=m.key(),
                                              value=None if value is None else b"copy:" + value,
                                              partition=p, headers=headers)
                        break
                    except BufferError:
                        self.producer.poll(0.1)
                first, _ = copied.get(p, (o, o))
                copied[p] = (first, o)
            if self.args.pace_ms:
                self.producer.flush(STEP_TIMEOUT)
                time.sleep(self.args.pace_ms / 1000)
            positions = [tp for tp in self.consumer.position(self.consumer.assignment()) if tp.offset >= 0]
            meta = self.consumer.consumer_group_metadata()
            self.retry("send_offsets_to_transaction",
                       lambda: self.producer.send_offsets_to_transaction(positions, meta, STEP_TIMEOUT))
            self.retry("commit_transaction", lambda: self.producer.commit_transaction(STEP_TIMEOUT))
        except self.ck.KafkaException as e:
            err = self._error(e)
            if err is not None and err.txn_requires_abort():
                self.abort(err)
                return None
            if err is not None and err.fatal():
                raise Fenced(str(err))
            raise
        self.txns += 1
        return json.dumps({
            "txn": self.txns,
            "transactional_id": self.args.transactional_id,
            "records": len(msgs),
            "copied": {str(p): [a, b] for p, (a, b) in sorted(copied.items())},
            "positions": {str(tp.partition): tp.offset for tp in sorted(positions, key=lambda t: t.partition)},
        }, separators=(",", ":"))

    def group_done(self, ends):
        """True once the group's committed offsets reach ends everywhere."""
        TopicPartition = self.ck.TopicPartition
        try:
            committed = self.consumer.committed([TopicPartition(self.args.input, p) for p in ends], timeout=10)
        except self.ck.KafkaException as e:
            log(f"committed: {e}")
            return False
        return all(tp.error is None and tp.offset >= ends[tp.partition] for tp in committed)

    def input_ends(self):
        md = self.retry("metadata", lambda: self.consumer.list_topics(self.args.input, timeout=STEP_TIMEOUT))
        t = md.topics.get(self.args.input)
        if t is None or t.error is not None:
            raise RuntimeError(f"input topic {self.args.input}: {t and t.error}")
        ends = {}
        for p in sorted(t.partitions):
            _, hi = self.retry("watermarks", lambda: self.consumer.get_watermark_offsets(
                self.ck.TopicPartition(self.args.input, p), timeout=STEP_TIMEOUT))
            ends[p] = hi
        return ends

    def run(self):
        args = self.args
        ends = parse_ends(args.until_offsets) if args.until_offsets else None
        if args.until_end:
            ends = self.input_ends()
        log(f"{args.transactional_id} in group {args.group}: {args.input} -> {args.output}"
            f"{f', until the committed offsets reach {ends}' if ends is not None else ''}"
            f"{f', until idle for {args.until_idle} s' if args.until_idle else ''}")
        self.retry("init_transactions", lambda: self.producer.init_transactions(STEP_TIMEOUT))
        self.consumer.subscribe([args.input], on_assign=self.on_assign, on_revoke=self.on_revoke)
        last_record = time.time()
        last_check = 0.0
        while self.stop is None:
            msgs = self.consumer.consume(num_messages=args.max_batch, timeout=0.5)
            good = []
            for m in msgs:
                if m.error():
                    if m.error().fatal():
                        raise RuntimeError(f"consumer: {m.error()}")
                    log(f"consumer: {m.error()}")
                    continue
                good.append(m)
            if good:
                last_record = time.time()
                line = self.copy(good)
                if line is not None:
                    print(line, flush=True)
            now = time.time()
            if ends is not None and (not good or now - last_check > 1.0):
                last_check = now
                if self.group_done(ends):
                    self.stop = f"the group's committed offsets reached {ends}"
            if args.until_idle and now - last_record > args.until_idle:
                self.stop = f"nothing to copy for {args.until_idle} s"
        log(f"stopping after {self.txns} transactions: {self.stop}")

    def close(self):
        try:
            self.consumer.close()  # LeaveGroup
        finally:
            self.producer.flush(5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--bootstrap", required=True, help="brokers' Kafka addresses, comma separated")
    ap.add_argument("--input", required=True, help="the topic to copy")
    ap.add_argument("--output", required=True, help="the topic to copy to (as many partitions as the input)")
    ap.add_argument("--group", required=True, help="the consumer group (classic protocol)")
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--until-end", action="store_true")
    ap.add_argument("--until-offsets", default="", metavar="P:O,...")
    ap.add_argument("--until-idle", type=float, default=0, metavar="SECONDS")
    ap.add_argument("--max-batch", type=int, default=100)
    ap.add_argument("--pace-ms", type=int, default=0)
    ap.add_argument("--transaction-timeout-ms", type=int, default=60000)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--ca-file", default="", metavar="PEM", help="connect with TLS, trusting this CA")
    ap.add_argument("--sasl-mechanism", default="", choices=["", "SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
    ap.add_argument("--sasl-username", default="")
    ap.add_argument("--sasl-password-file", default="", metavar="FILE")
    ap.add_argument("--debug", default="")
    args = ap.parse_args()
    if bool(args.sasl_mechanism) != bool(args.sasl_username) or bool(args.sasl_mechanism) != bool(args.sasl_password_file):
        ap.error("--sasl-mechanism, --sasl-username and --sasl-password-file go together")
    if args.until_end and args.until_offsets:
        ap.error("--until-end and --until-offsets exclude each other")
    if args.until_offsets:
        try:
            parse_ends(args.until_offsets)
        except ValueError:
            ap.error("--until-offsets: P:O,P:O,... (partition:end offset)")
    if args.max_batch < 1:
        ap.error("--max-batch must be at least 1")
    try:
        import confluent_kafka as ck
    except ImportError as e:
        log(f"cannot import confluent_kafka ({e}): install Debian's python3-confluent-kafka and use /usr/bin/python3")
        return 1
    copier = Copier(ck, args)

    def stop(signum, _frame):
        copier.stop = f"signal {signal.Signals(signum).name}"
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        copier.run()
    except Fenced as e:
        log(f"FAILED: fenced or fatal producer error: {e}")
        return 3
    except Exception as e:  # noqa: BLE001 - every error ends the run with its message
        log(f"FAILED: {type(e).__name__}: {e}")
        return 1
    finally:
        try:
            copier.close()
        except Exception as e:  # noqa: BLE001
            log(f"close: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
