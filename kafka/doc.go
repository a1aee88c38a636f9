// Package kafka is the Kafka-protocol door (issue 34, decision 65): a
// listener that real Kafka clients (franz-go, librdkafka, kafkajs, the
// Java client) produce to and consume from, served by the same brokers,
// logs, replication, producer state and authorization as the gRPC door
// in package api.
//
// Framing and every message's encoding come from franz-go's kmsg
// (generated from Kafka's own message specs). A connection's requests are
// read and started in order, one at a time — so an idempotent producer's
// pipelined batches are appended in the order it sent them — while the
// waits that are not work (acks=all, a fetch's long poll) overlap with
// the next requests; answers go back in request order.
//
// The door translates: Kafka's messages to calls on cluster and
// coordinator, Kafka's v2 record batch to and from Sluice's canonical
// batch (proto/kafkabatch), Sluice's error codes (already Kafka's numbers)
// back. It never imports api; a rule either door needs lives below both.
//
// Connections authenticate Kafka's way (authn.go, sasl.go) onto the
// principals of package auth — SASL SCRAM, PLAIN and OAUTHBEARER checked
// by auth's Authenticator and JWTValidator, or a TLS client certificate
// through its PrincipalMapper — so the gRPC door's ACLs and quotas apply.
package kafka
