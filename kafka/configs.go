package kafka

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Configs over the Kafka door: DescribeConfigs, IncrementalAlterConfigs
// and the legacy AlterConfigs. Topic configs are the topic's, described
// and altered by cluster's rules, altered through the controller
// (controller.AlterTopicConfigs). A broker's settings are static
// (sluiced's flags): DescribeConfigs answers the few this door knows,
// read-only, and alterations of a broker are refused.

// configAlterTimeout bounds a forwarded config alteration (the requests
// carry no timeout).
const configAlterTimeout = 30 * time.Second

// describeConfigs serves DescribeConfigs: per resource, a topic's every
// config (effective value; source DYNAMIC_TOPIC_CONFIG when the topic
// sets it, else DEFAULT_CONFIG; synonyms and documentation when asked),
// or this broker's static settings (brokerConfigs). DESCRIBE_CONFIGS on
// the topic, or on the cluster for a broker, as Kafka's; a topic the
// caller may not describe is TOPIC_AUTHORIZATION_FAILED whether or not
// it exists, an unknown one UNKNOWN_TOPIC_OR_PARTITION.
func describeConfigs(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	im := c.s.cfg.Metadata.Image()
	loadErr := c.s.leaders.MetadataLoaded()
	resp.Resources = make([]kmsg.DescribeConfigsResponseResource, len(req.Resources))
	for i, rr := range req.Resources {
		res := &resp.Resources[i]
		*res = kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		var entries []configEntry
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			name := rr.ResourceName
			t := im.Topics[name]
			switch {
			case !c.allowed(c.ctx, auth.OpDescribeConfigs, auth.Topic(name)):
				res.ErrorCode, res.ErrorMessage = c.denied(auth.OpDescribeConfigs, auth.Topic(name))
				continue
			case loadErr != nil:
				res.ErrorCode, res.ErrorMessage = errCode(loadErr), errMessage(loadErr)
				continue
			case t == nil:
				err := errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", errs.Echo(name))
				res.ErrorCode, res.ErrorMessage = errCode(err), errMessage(err)
				continue
			}
			for _, e := range cluster.DescribeTopicConfigs(t.Configs, t.ReplicationFactor()) {
				ce := configEntry{TopicConfigDef: e.TopicConfigDef, value: e.Value, source: kmsg.ConfigSourceDefaultConfig}
				if e.Set {
					ce.source = kmsg.ConfigSourceDynamicTopicConfig
					ce.synonyms = append(ce.synonyms, configSynonym{e.Value, kmsg.ConfigSourceDynamicTopicConfig})
				}
				ce.synonyms = append(ce.synonyms, configSynonym{e.Default, kmsg.ConfigSourceDefaultConfig})
				entries = append(entries, ce)
			}
		case kmsg.ConfigResourceTypeBroker:
			if !c.allowed(c.ctx, auth.OpDescribeConfigs, auth.Cluster) {
				res.ErrorCode, res.ErrorMessage = c.denied(auth.OpDescribeConfigs, auth.Cluster)
				continue
			}
			if err := c.checkBrokerName(rr.ResourceName); err != nil {
				res.ErrorCode, res.ErrorMessage = errCode(err), errMessage(err)
				continue
			}
			entries = c.brokerConfigs()
		default:
			err := errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "config resources of type %s are not served: topics and brokers are", rr.ResourceType)
			res.ErrorCode, res.ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		for _, e := range entries {
			if len(rr.ConfigNames) > 0 && !slices.Contains(rr.ConfigNames, e.Name) {
				continue
			}
			res.Configs = append(res.Configs, e.kafka(req.IncludeSynonyms, req.IncludeDocumentation))
		}
	}
	return resp
}

// configEntry is one config of a DescribeConfigs answer.
type configEntry struct {
	cluster.TopicConfigDef
	value    string
	source   kmsg.ConfigSource
	readOnly bool
	// synonyms, in Kafka's order: the value in force first.
	synonyms []configSynonym
}

type configSynonym struct {
	value  string
	source kmsg.ConfigSource
}

// kafka is e in a DescribeConfigs answer, with its synonyms and
// documentation if asked for (the versions without them drop them).
func (e configEntry) kafka(synonyms, docs bool) kmsg.DescribeConfigsResponseResourceConfig {
	ce := kmsg.NewDescribeConfigsResponseResourceConfig()
	ce.Name, ce.Value, ce.ReadOnly = e.Name, kmsg.StringPtr(e.value), e.readOnly
	ce.Source, ce.IsDefault = e.source, e.source == kmsg.ConfigSourceDefaultConfig
	ce.ConfigType = kmsg.ConfigType(e.Type)
	if docs && e.Doc != "" {
		ce.Documentation = kmsg.StringPtr(e.Doc)
	}
	if synonyms {
		for _, s := range e.synonyms {
			ce.ConfigSynonyms = append(ce.ConfigSynonyms, kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{
				Name: e.Name, Value: kmsg.StringPtr(s.value), Source: s.source})
		}
	}
	return ce
}

// checkBrokerName: a broker resource names this broker ("" is Kafka's
// cluster-wide default; Sluice has no dynamic broker configs, so it is
// this broker's static settings too). Another broker is INVALID_REQUEST,
// as Kafka answers a request sent to the wrong broker.
func (c *conn) checkBrokerName(name string) error {
	if name == "" || name == strconv.Itoa(int(c.s.cfg.NodeID)) {
		return nil
	}
	return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "broker %q is not this broker (%d): send the request to it", errs.Echo(name), c.s.cfg.NodeID)
}

// brokerConfigs are the settings of this broker a Kafka client may ask
// for, read-only (STATIC_BROKER_CONFIG: sluiced's flags set them).
func (c *conn) brokerConfigs() []configEntry {
	cfg := c.s.cfg
	static := func(name string, typ cluster.ConfigType, value, doc string) configEntry {
		return configEntry{TopicConfigDef: cluster.TopicConfigDef{Name: name, Type: typ, Doc: doc}, value: value,
			source: kmsg.ConfigSourceStaticBrokerConfig, readOnly: true, synonyms: []configSynonym{{value, kmsg.ConfigSourceStaticBrokerConfig}}}
	}
	out := []configEntry{
		static("auto.create.topics.enable", cluster.ConfigTypeBoolean, "false", "Topics are never created by Metadata or Produce: create them with CreateTopics."),
		static("broker.id", cluster.ConfigTypeInt, strconv.Itoa(int(cfg.NodeID)), "This broker's id (sluiced --node-id)."),
		static("connections.max.idle.ms", cluster.ConfigTypeLong, strconv.FormatInt(cfg.IdleTimeout.Milliseconds(), 10), "An idle Kafka connection is closed after this long (ms)."),
	}
	if b := c.s.cfg.Metadata.Image().Brokers[cfg.NodeID]; b != nil && b.Rack != "" {
		out = append(out, static("broker.rack", cluster.ConfigTypeString, b.Rack, "This broker's rack (sluiced --rack)."))
	}
	out = append(out, static("node.id", cluster.ConfigTypeInt, strconv.Itoa(int(cfg.NodeID)), "This node's id (sluiced --node-id)."),
		static("socket.request.max.bytes", cluster.ConfigTypeInt, strconv.Itoa(int(cfg.MaxRequestSize)), "The largest request frame this listener reads (bytes)."))
	return out
}

// incrementalAlterConfigs serves IncrementalAlterConfigs: each topic's
// operations (SET, DELETE, APPEND and SUBTRACT on list configs) applied
// whole or not at all through the controller (cluster.AlterTopicConfigs
// holds the rules: an unknown config is INVALID_CONFIG). ALTER_CONFIGS on
// the topic, or on the cluster for a broker, as Kafka's; a broker's
// settings are static (INVALID_REQUEST). A resource named twice is
// refused (INVALID_REQUEST), as Kafka refuses it.
func incrementalAlterConfigs(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	resp.Resources = make([]kmsg.IncrementalAlterConfigsResponseResource, len(req.Resources))
	alters := make([]*internalv1.TopicConfigAlteration, len(req.Resources))
	keys := make([]configResource, len(req.Resources))
	for i, rr := range req.Resources {
		resp.Resources[i] = kmsg.NewIncrementalAlterConfigsResponseResource()
		resp.Resources[i].ResourceType, resp.Resources[i].ResourceName = rr.ResourceType, rr.ResourceName
		keys[i] = configResource{rr.ResourceType, rr.ResourceName}
		a := &internalv1.TopicConfigAlteration{Topic: rr.ResourceName}
		for _, cfg := range rr.Configs {
			a.Ops = append(a.Ops, &internalv1.TopicConfigOp{Key: cfg.Name, Op: int32(cfg.Op), Value: cfg.Value})
		}
		alters[i] = a
	}
	codes, msgs := c.alterConfigs(keys, alters, req.ValidateOnly)
	for i := range resp.Resources {
		resp.Resources[i].ErrorCode, resp.Resources[i].ErrorMessage = codes[i], msgs[i]
	}
	return resp
}

// alterConfigs serves the legacy AlterConfigs: each topic's configs
// replaced by the request's (null values left out), as
// incrementalAlterConfigs otherwise (cluster.ReplaceTopicConfigs).
func alterConfigs(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	resp.Resources = make([]kmsg.AlterConfigsResponseResource, len(req.Resources))
	alters := make([]*internalv1.TopicConfigAlteration, len(req.Resources))
	keys := make([]configResource, len(req.Resources))
	for i, rr := range req.Resources {
		resp.Resources[i] = kmsg.NewAlterConfigsResponseResource()
		resp.Resources[i].ResourceType, resp.Resources[i].ResourceName = rr.ResourceType, rr.ResourceName
		keys[i] = configResource{rr.ResourceType, rr.ResourceName}
		a := &internalv1.TopicConfigAlteration{Topic: rr.ResourceName, Replace: true, Configs: map[string]string{}}
		for _, cfg := range rr.Configs {
			if cfg.Value != nil {
				a.Configs[cfg.Name] = *cfg.Value
			}
		}
		alters[i] = a
	}
	codes, msgs := c.alterConfigs(keys, alters, req.ValidateOnly)
	for i := range resp.Resources {
		resp.Resources[i].ErrorCode, resp.Resources[i].ErrorMessage = codes[i], msgs[i]
	}
	return resp
}

// configResource names a config resource of a request.
type configResource struct {
	typ  kmsg.ConfigResourceType
	name string
}

// alterConfigs authorizes and forwards the alterations of both
// AlterConfigs requests: alters[i] is resources[i]'s, and codes[i],
// msgs[i] its outcome.
func (c *conn) alterConfigs(resources []configResource, alters []*internalv1.TopicConfigAlteration, validateOnly bool) (codes []int16, msgs []*string) {
	codes, msgs = make([]int16, len(resources)), make([]*string, len(resources))
	named := map[configResource]int{}
	for _, r := range resources {
		named[r]++
	}
	refuse := func(i int, err error) { codes[i], msgs[i] = errCode(err), errMessage(err) }
	fwd := &internalv1.ControllerAlterTopicConfigsRequest{ValidateOnly: validateOnly}
	var fwdAt []int
	for i, r := range resources {
		switch {
		case named[r] > 1:
			refuse(i, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "resource %q of type %s is named more than once", errs.Echo(r.name), r.typ))
		case r.typ == kmsg.ConfigResourceTypeTopic:
			if !c.allowed(c.ctx, auth.OpAlterConfigs, auth.Topic(r.name)) {
				codes[i], msgs[i] = c.denied(auth.OpAlterConfigs, auth.Topic(r.name))
				continue
			}
			fwd.Topics = append(fwd.Topics, alters[i])
			fwdAt = append(fwdAt, i)
		case r.typ == kmsg.ConfigResourceTypeBroker || r.typ == kmsg.ConfigResourceTypeBrokerLogger:
			if !c.allowed(c.ctx, auth.OpAlterConfigs, auth.Cluster) {
				codes[i], msgs[i] = c.denied(auth.OpAlterConfigs, auth.Cluster)
				continue
			}
			refuse(i, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "a broker's settings are static in Sluice (sluiced's flags): they cannot be altered over the Kafka protocol"))
		default:
			refuse(i, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "config resources of type %s are not served: topics are", r.typ))
		}
	}
	if len(fwd.Topics) == 0 {
		return codes, msgs
	}
	var out *internalv1.ControllerAlterTopicConfigsResponse
	err := c.forward(configAlterTimeout, "the configs were altered", func(ctx context.Context, cl internalv1.ControllerClient) (uint64, error) {
		var err error
		out, err = cl.AlterTopicConfigs(ctx, fwd)
		if err == nil && len(out.Topics) != len(fwd.Topics) {
			err = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "the controller answered %d topics for %d", len(out.Topics), len(fwd.Topics))
		}
		if err != nil {
			return 0, err
		}
		return out.MetadataOffset, nil
	})
	for j, i := range fwdAt {
		if err != nil {
			refuse(i, err)
			continue
		}
		codes[i], msgs[i] = outcome(out.Topics[j])
		if codes[i] == 0 && !validateOnly {
			c.s.log.Info("topic configs altered", "topic", resources[i].name, "by", c.caller.Principal.String())
		}
	}
	return codes, msgs
}
