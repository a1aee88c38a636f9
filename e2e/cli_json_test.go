package e2e

import "github.com/sluice-io/sluice/cmd/sluice/output"

// The CLI's --output json documents, as the suites read them: the CLI's
// own types (cmd/sluice/output), so the two cannot drift apart.
type (
	clusterJSON   = output.Cluster
	voterJSON     = output.Voter
	brokerJSON    = output.Broker
	topicJSON     = output.Topic
	partitionJSON = output.Partition
	benchResult   = output.BenchResult
)
