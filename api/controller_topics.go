package api

import (
	"context"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Topics' configs altered and partitions added, on the controller's side
// (the Kafka door's IncrementalAlterConfigs, AlterConfigs and
// CreatePartitions forward here). The rules are the controller's
// (controller.AlterTopicConfigs, controller.CreatePartitions) and
// cluster's (cluster.AlterTopicConfigs); this file translates, and keeps
// internal topics as their coordinators need them.

// internalTopicRefused is why an internal topic is not altered: its
// coordinators hash keys over its partitions and rely on its configs
// (__consumer_offsets is compacted).
func internalTopicRefused(name, what string) error {
	return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "topic %q is internal: its %s belong to its coordinators", errs.Echo(name), what)
}

// AlterTopicConfigs implements the Controller service: each topic's
// alteration applied whole or refused (cluster.AlterTopicConfigs, or
// cluster.ReplaceTopicConfigs for a replacement), one outcome per topic
// in order. Internal topics are refused (INVALID_REQUEST).
func (s *ControllerService) AlterTopicConfigs(ctx context.Context, req *internalv1.ControllerAlterTopicConfigsRequest) (*internalv1.ControllerAlterTopicConfigsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	resp := &internalv1.ControllerAlterTopicConfigsResponse{Topics: make([]*internalv1.TopicOutcome, len(req.Topics))}
	var edits []controller.TopicConfigEdit
	var editOf []int // req.Topics[editOf[j]] is edits[j]
	for i, t := range req.Topics {
		resp.Topics[i] = &internalv1.TopicOutcome{Topic: t.Topic}
		var err error
		switch {
		case cluster.IsInternalTopic(t.Topic):
			err = internalTopicRefused(t.Topic, "configs")
		case t.Replace && len(t.Ops) > 0:
			err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "topic %q: a replacement of the configs has no operations", errs.Echo(t.Topic))
		}
		if err != nil {
			resp.Topics[i].ErrorCode, resp.Topics[i].ErrorMessage = errs.Code(err), errs.Message(err)
			continue
		}
		edit := func(configs map[string]string, rf int32) (map[string]string, error) {
			return cluster.ReplaceTopicConfigs(t.Configs, rf)
		}
		if !t.Replace {
			ops := make([]cluster.ConfigOp, len(t.Ops))
			for k, op := range t.Ops {
				ops[k] = cluster.ConfigOp{Key: op.Key, Op: cluster.ConfigOpType(op.Op), Value: op.Value}
			}
			edit = func(configs map[string]string, rf int32) (map[string]string, error) {
				return cluster.AlterTopicConfigs(configs, ops, rf)
			}
		}
		edits = append(edits, controller.TopicConfigEdit{Topic: t.Topic, Edit: edit})
		editOf = append(editOf, i)
	}
	perTopic, offset, err := s.ctl.AlterTopicConfigs(ctx, edits, req.ValidateOnly)
	if err != nil {
		return nil, s.status(err)
	}
	for j, err := range perTopic {
		resp.Topics[editOf[j]].ErrorCode, resp.Topics[editOf[j]].ErrorMessage = errs.Code(err), errs.Message(err)
	}
	resp.MetadataOffset = offset
	return resp, nil
}

// CreatePartitions implements the Controller service: each topic grown
// to its count (controller.CreatePartitions), one outcome per topic in
// order. Internal topics are refused (INVALID_REQUEST).
func (s *ControllerService) CreatePartitions(ctx context.Context, req *internalv1.ControllerCreatePartitionsRequest) (*internalv1.ControllerCreatePartitionsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	resp := &internalv1.ControllerCreatePartitionsResponse{Topics: make([]*internalv1.TopicOutcome, len(req.Topics))}
	var topics []controller.PartitionsToCreate
	var topicOf []int
	for i, t := range req.Topics {
		resp.Topics[i] = &internalv1.TopicOutcome{Topic: t.Topic}
		if cluster.IsInternalTopic(t.Topic) {
			err := internalTopicRefused(t.Topic, "partitions")
			resp.Topics[i].ErrorCode, resp.Topics[i].ErrorMessage = errs.Code(err), errs.Message(err)
			continue
		}
		topics = append(topics, controller.PartitionsToCreate{Topic: t.Topic, Count: t.Count})
		topicOf = append(topicOf, i)
	}
	perTopic, offset, err := s.ctl.CreatePartitions(ctx, topics, req.ValidateOnly)
	if err != nil {
		return nil, s.status(err)
	}
	for j, err := range perTopic {
		resp.Topics[topicOf[j]].ErrorCode, resp.Topics[topicOf[j]].ErrorMessage = errs.Code(err), errs.Message(err)
	}
	resp.MetadataOffset = offset
	return resp, nil
}
