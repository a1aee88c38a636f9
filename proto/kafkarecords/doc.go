// Package kafkarecords is Kafka's v2 record encoding — the records of a
// record batch, after its header — its compression codecs, and the
// conversion of records between that encoding and the canonical record
// entries of proto/batch (field 12 of sluice.v1.RecordBatch). It is pure:
// no I/O, no clock, no goroutines.
//
// Two packages use it: proto/batch, whose compressed batches carry Kafka's
// record encoding compressed in field 13 (decision 67), and
// proto/kafkabatch, the Kafka door's conversion of whole batches. It
// imports neither.
//
// A record is a varint length, then attributes int8 (unused by Kafka),
// timestampDelta varlong, offsetDelta varint, key and value (varint
// length, -1 for null, then the bytes), a varint header count and per
// header a key (varint length, never null) and a value (varint length, -1
// for null). Varints are zigzag-encoded, as protobuf's sint32 and sint64.
//
// Errors are *errs.Error values whose Code is the answer for the
// partition and whose Cause is one of the sentinels of errors.go
// (errors.Is).
package kafkarecords
