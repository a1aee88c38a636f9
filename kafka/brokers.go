package kafka

import "github.com/sluice-io/sluice/cluster/controller"

// brokerAddress is where Kafka clients reach broker b ("" if it has no
// Kafka listener).
func brokerAddress(b *controller.Broker) string { return b.KafkaAddress }
