package controller

import (
	"maps"
	"slices"
)

// ImageEditor applies records to a copy of an image that shares with the
// original everything the records leave alone (copy-on-write, issue 31):
// the maps of brokers, topics and users are copied, and a broker, topic,
// partition, user's map of credentials or the set of ACLs is copied only
// before a record changes it. So a broker applying one partition change
// to an image of 10,000 partitions copies one partition and one topic's
// slice of pointers, not the whole image, and a reader comparing the two
// images finds every untouched topic, partition and broker at the same
// pointer (Same*). The original is never modified and stays safe to read
// concurrently.
type ImageEditor struct {
	im      *Image
	topics  map[string]map[int32]bool // topics copied by this edit → partitions copied
	configs map[string]bool           // topics whose Configs map was copied
	brokers map[int32]bool            // brokers copied by this edit
	users   map[string]bool           // users whose credential map was copied
	acls    bool                      // the Acls set was copied
	quotas  bool                      // the ClientQuotas map was copied
	full    bool                      // everything copied (an unknown record)
}

// EditImage starts an edit of base (which it does not modify).
func EditImage(base *Image) *ImageEditor {
	im := &Image{
		Offset:                   base.Offset,
		ClusterID:                base.ClusterID,
		Brokers:                  maps.Clone(base.Brokers),
		Topics:                   maps.Clone(base.Topics),
		NextProducerIDBlockStart: base.NextProducerIDBlockStart,
		Features:                 cloneMap(base.Features),
		Configs:                  cloneMap(base.Configs),
		Users:                    maps.Clone(base.Users),
		Acls:                     base.Acls, // copied before a record changes it (ownAcls)
		AclsVersion:              base.AclsVersion,
		ClientQuotas:             base.ClientQuotas, // copied before a record changes it (ownQuotas)
		QuotasVersion:            base.QuotasVersion,
	}
	if im.Brokers == nil {
		im.Brokers = map[int32]*Broker{}
	}
	if im.Topics == nil {
		im.Topics = map[string]*Topic{}
	}
	if im.Users == nil {
		im.Users = map[string]map[string]ScramCredential{}
	}
	owned := false
	if im.Acls == nil {
		im.Acls, owned = AclSet{}, true
	}
	quotasOwned := false
	if im.ClientQuotas == nil {
		im.ClientQuotas, quotasOwned = QuotaMap{}, true
	}
	return &ImageEditor{im: im, topics: map[string]map[int32]bool{}, configs: map[string]bool{}, brokers: map[int32]bool{},
		users: map[string]bool{}, acls: owned, quotas: quotasOwned}
}

// Image is the edited image. Once published it must not be edited
// further: start a new edit from it.
func (e *ImageEditor) Image() *Image { return e.im }

// Apply applies r at offset (the package's Apply) after copying what r
// changes.
func (e *ImageEditor) Apply(r Record, offset uint64) (Result, error) {
	e.own(r)
	return Apply(e.im, r, offset)
}

// own copies what r's apply may modify in place. Map entries added or
// deleted need no copy (the maps are the edit's own).
func (e *ImageEditor) own(r Record) {
	if e.full {
		return
	}
	switch r := r.(type) {
	case RegisterBroker:
		e.ownBroker(r.BrokerID)
	case FenceBroker:
		e.ownBroker(r.BrokerID)
	case UnfenceBroker:
		e.ownBroker(r.BrokerID)
	case OfflineReplicas:
		e.ownBroker(r.BrokerID)
	case PartitionChange:
		e.ownPartition(r.Topic, r.Partition)
	case ConfigChange:
		if r.Topic != "" {
			e.ownTopic(r.Topic)
			if t := e.im.Topics[r.Topic]; t != nil && !e.configs[r.Topic] {
				t.Configs = cloneMap(t.Configs)
				e.configs[r.Topic] = true
			}
		}
	case CreatePartitions:
		// Apply gives the topic a new slice of partitions.
		e.ownTopic(r.Topic)
	case TopicConfigs:
		// Apply gives the topic a new map of configs.
		e.ownTopic(r.Topic)
	case UserScramCredential:
		e.ownUser(r.User)
	case RemoveUserScramCredential:
		e.ownUser(r.User)
	case CreateAcl:
		// An ACL already held (a no-op) or refused leaves the set alone.
		if !e.im.HasAcl(r.Acl) {
			e.ownAcls()
		}
	case RemoveAcl:
		if e.im.HasAcl(r.Acl) {
			e.ownAcls()
		}
	case ClientQuota:
		// A no-op or refused record leaves the map alone; the FSM's
		// checks run after own, so copy whenever it may change.
		if quotaChanges(e.im, r) {
			e.ownQuotas()
		}
	case CreateTopic, DeleteTopic, UnregisterBroker, ProducerIDsBlock, FeatureLevel, BootstrapCluster:
		// Map entries added or removed, scalars, or the edit's own
		// Features and Configs maps.
	default:
		// A record this function does not know: copy everything.
		for id, b := range e.im.Brokers {
			e.im.Brokers[id] = b.clone()
		}
		for name, t := range e.im.Topics {
			e.im.Topics[name] = t.Clone()
		}
		e.im.Users = cloneUsers(e.im.Users)
		e.ownAcls()
		e.ownQuotas()
		e.full = true
	}
}

// ownUser copies user's map of credentials (not the credentials: a
// record replaces a credential, never modifies one).
func (e *ImageEditor) ownUser(name string) {
	if creds := e.im.Users[name]; creds != nil && !e.users[name] {
		e.im.Users[name] = maps.Clone(creds)
		e.users[name] = true
	}
}

// ownAcls copies the set of ACLs (an ACL is a value: the set is all
// there is to copy). One copy serves every record of the edit: a broker
// applying a thousand creations copies the set once.
func (e *ImageEditor) ownAcls() {
	if !e.acls {
		e.im.Acls = maps.Clone(e.im.Acls)
		e.acls = true
	}
}

// ownQuotas copies the map of quotas (its values are scalars), once per
// edit.
func (e *ImageEditor) ownQuotas() {
	if !e.quotas {
		e.im.ClientQuotas = maps.Clone(e.im.ClientQuotas)
		e.quotas = true
	}
}

func (e *ImageEditor) ownBroker(id int32) {
	if b := e.im.Brokers[id]; b != nil && !e.brokers[id] {
		e.im.Brokers[id] = b.clone()
		e.brokers[id] = true
	}
}

// ownTopic copies topic name's struct and its slice of partition
// pointers (not the partitions).
func (e *ImageEditor) ownTopic(name string) map[int32]bool {
	if owned, ok := e.topics[name]; ok {
		return owned
	}
	t := e.im.Topics[name]
	if t == nil {
		return nil
	}
	c := *t
	c.Partitions = slices.Clone(t.Partitions)
	e.im.Topics[name] = &c
	owned := map[int32]bool{}
	e.topics[name] = owned
	return owned
}

func (e *ImageEditor) ownPartition(name string, i int32) {
	owned := e.ownTopic(name)
	t := e.im.Topics[name]
	if owned == nil || i < 0 || int(i) >= len(t.Partitions) || owned[i] {
		return
	}
	t.Partitions[i] = t.Partitions[i].Clone()
	owned[i] = true
}

// clone returns a deep copy of b.
func (b *Broker) clone() *Broker {
	c := *b
	c.OfflineReplicas = slices.Clone(b.OfflineReplicas)
	return &c
}
