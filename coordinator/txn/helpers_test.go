package txn

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// Golden files in testdata are regenerated with
//
//	go test ./coordinator/txn/ -update
//
// and the diff reviewed: a change to a golden record file without a
// RecordVersion bump breaks every log already written.
var update = flag.Bool("update", false, "rewrite golden files in testdata")

// golden compares got with testdata/name, rewriting it first under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (run with -update and review the diff):\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// kafkaExamples is the part of testdata/kafka-examples.json (a copy of the
// team's vectors from Kafka 4.5) these tests use.
type kafkaExamples struct {
	CommitAbortCommit struct {
		InitProducerID struct {
			ProducerID int64 `json:"producer_id"`
			Epoch      int16 `json:"epoch"`
		} `json:"init_producer_id"`
		TransactionStateLog [][2]any `json:"transaction_state_log"`
		FinalDescribe       struct {
			ProducerID    int64    `json:"producer_id"`
			ProducerEpoch int16    `json:"producer_epoch"`
			State         string   `json:"state"`
			Partitions    []string `json:"partitions"`
		} `json:"final_describe"`
	} `json:"commit_abort_commit"`
	Fencing struct {
		TransactionStateLog [][2]any `json:"transaction_state_log"`
	} `json:"fencing"`
	ValidPreviousStates map[string][]string `json:"valid_previous_states"`
	Defaults            map[string]any      `json:"defaults"`
}

func loadKafkaExamples(t *testing.T) kafkaExamples {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "kafka-examples.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v kafkaExamples
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
