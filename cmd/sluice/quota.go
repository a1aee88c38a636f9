package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// sluice quota: client quotas (issue 33), what Kafka's
// kafka-configs --entity-type users --entity-name alice --alter
// --add-config producer_byte_rate=1024 does, with its keys.

const quotaUsage = `usage: sluice quota COMMAND [ARGS]

Client quotas (Kafka's kafka-configs --entity-type users|clients --alter
--add-config producer_byte_rate=N): rates each broker holds a user and/or
client id to, throttling (never refusing) what goes over.

Commands:
  set ENTITY [--producer-byte-rate N] [--consumer-byte-rate N] [--request-percentage P]
      sets the entity's quotas named (the others are kept)
  delete ENTITY [--producer-byte-rate] [--consumer-byte-rate] [--request-percentage]
      removes the quotas named (every one of the entity's when none is)
  list [--user U | --user-default] [--client-id C | --client-id-default]
      the quotas of the entities matching (every entity without a filter)

  ENTITY: (--user U | --user-default) and/or (--client-id C | --client-id-default).
  The quota applying to a connection is the most specific one set, in Kafka's
  order: user and client id, user and default client id, user, default user and
  client id, default user and default client id, default user, client id,
  default client id. A default applies to each user (or client id) alone.

Run "sluice quota COMMAND --help" for a command's flags.
`

func (e *env) quota(ctx context.Context, args []string) error {
	return e.subcommand(ctx, "quota", quotaUsage, args, map[string]func(context.Context, []string) error{
		"set":    e.quotaSet,
		"delete": e.quotaDelete,
		"list":   e.quotaList,
	})
}

// quotaEntityFlags are the flags naming an entity.
type quotaEntityFlags struct {
	user, clientID               *string
	userDefault, clientIDDefault *bool
}

func addQuotaEntityFlags(fs *flag.FlagSet) quotaEntityFlags {
	return quotaEntityFlags{
		user:            fs.String("user", "", "the user (a principal's name, without User:)"),
		userDefault:     fs.Bool("user-default", false, "the default user: each user without a quota of its own"),
		clientID:        fs.String("client-id", "", "the client id"),
		clientIDDefault: fs.Bool("client-id-default", false, "the default client id: each client id without a quota of its own"),
	}
}

func quotaName(name string, dflt bool, what string) (*sluicev1.QuotaEntityName, error) {
	switch {
	case name != "" && dflt:
		return nil, fmt.Errorf("--%s and --%s-default exclude each other", what, what)
	case dflt:
		return &sluicev1.QuotaEntityName{IsDefault: true}, nil
	case name != "":
		return &sluicev1.QuotaEntityName{Name: name}, nil
	}
	return nil, nil
}

// entity is the entity the flags name; one component at least.
func (f quotaEntityFlags) entity() (*sluicev1.QuotaEntity, error) {
	u, err := quotaName(*f.user, *f.userDefault, "user")
	if err != nil {
		return nil, err
	}
	c, err := quotaName(*f.clientID, *f.clientIDDefault, "client-id")
	if err != nil {
		return nil, err
	}
	if u == nil && c == nil {
		return nil, errors.New("name the entity: --user U or --user-default, and/or --client-id C or --client-id-default")
	}
	return &sluicev1.QuotaEntity{User: u, ClientId: c}, nil
}

func (e *env) quotaSet(ctx context.Context, args []string) error {
	fs := e.newFlags("quota set", "quota set ENTITY [--producer-byte-rate N] [--consumer-byte-rate N] [--request-percentage P]\n\n"+
		"Sets the entity's quotas named; its others are kept. ENTITY is (--user U | --user-default) and/or\n"+
		"(--client-id C | --client-id-default). Rates are per broker: a producer_byte_rate of 1048576 lets the\n"+
		"entity write 1 MiB/s to each broker.")
	ent := addQuotaEntityFlags(fs)
	produce := fs.Float64("producer-byte-rate", 0, "bytes per second of produced batches, per broker (producer_byte_rate)")
	consume := fs.Float64("consumer-byte-rate", 0, "bytes per second of fetched batches, per broker (consumer_byte_rate)")
	request := fs.Float64("request-percentage", 0, "percent of one request thread the broker may spend handling the entity's requests, waits left out, per broker (request_percentage)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	entity, err := ent.entity()
	if err != nil {
		return fmt.Errorf("quota set: %w", err)
	}
	var ops []*sluicev1.QuotaOp
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, q := range []struct {
		flag, key string
		v         float64
	}{{"producer-byte-rate", client.QuotaProducerByteRate, *produce}, {"consumer-byte-rate", client.QuotaConsumerByteRate, *consume},
		{"request-percentage", client.QuotaRequestPercentage, *request}} {
		if set[q.flag] {
			ops = append(ops, &sluicev1.QuotaOp{Key: q.key, Value: q.v})
		}
	}
	if len(ops) == 0 {
		return errors.New("quota set: name a quota: --producer-byte-rate, --consumer-byte-rate or --request-percentage")
	}
	return e.alterQuotas(ctx, "quota set", entity, ops)
}

func (e *env) quotaDelete(ctx context.Context, args []string) error {
	fs := e.newFlags("quota delete", "quota delete ENTITY [--producer-byte-rate] [--consumer-byte-rate] [--request-percentage]\n\n"+
		"Removes the entity's quotas named, or every one it has when none is named: the next entity in the\n"+
		"precedence order then applies.")
	ent := addQuotaEntityFlags(fs)
	produce := fs.Bool("producer-byte-rate", false, "remove producer_byte_rate")
	consume := fs.Bool("consumer-byte-rate", false, "remove consumer_byte_rate")
	request := fs.Bool("request-percentage", false, "remove request_percentage")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	entity, err := ent.entity()
	if err != nil {
		return fmt.Errorf("quota delete: %w", err)
	}
	all := !*produce && !*consume && !*request
	var ops []*sluicev1.QuotaOp
	for _, q := range []struct {
		key string
		on  bool
	}{{client.QuotaProducerByteRate, *produce}, {client.QuotaConsumerByteRate, *consume}, {client.QuotaRequestPercentage, *request}} {
		if all || q.on {
			ops = append(ops, &sluicev1.QuotaOp{Key: q.key, Remove: true})
		}
	}
	return e.alterQuotas(ctx, "quota delete", entity, ops)
}

func (e *env) alterQuotas(ctx context.Context, cmd string, entity *sluicev1.QuotaEntity, ops []*sluicev1.QuotaOp) error {
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.AlterClientQuotas(ctx, []*sluicev1.ClientQuotaAlteration{{Entity: entity, Ops: ops}}, false)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if res[0] != nil {
		return fmt.Errorf("%s: %s: %w", cmd, entityString(entity), res[0])
	}
	fmt.Fprintf(e.stdout, "quotas of %s altered\n", entityString(entity))
	return nil
}

// reportThrottle tells on stderr, when the brokers throttled the command
// for a client quota, how much: the records were all sent or read, later.
func (e *env) reportThrottle(cmd string, stats func() client.ThrottleStats) {
	if st := stats(); st.Count > 0 {
		fmt.Fprintf(e.stderr, "%s: throttled by client quotas: %s, %v in all, at most %v\n", cmd, plural(st.Count, "answer"), st.Total, st.Max)
	}
}

func nameString(n *sluicev1.QuotaEntityName) string {
	switch {
	case n == nil:
		return ""
	case n.IsDefault:
		return "<default>"
	}
	return n.Name
}

// entityString writes an entity as kafka-configs does: user=alice,client-id=<default>.
func entityString(e *sluicev1.QuotaEntity) string {
	var parts []string
	if e.GetUser() != nil {
		parts = append(parts, "user="+nameString(e.User))
	}
	if e.GetClientId() != nil {
		parts = append(parts, "client-id="+nameString(e.ClientId))
	}
	return strings.Join(parts, ",")
}

func quotaFilter(name string, dflt bool) *sluicev1.QuotaFilterComponent {
	switch {
	case dflt:
		return &sluicev1.QuotaFilterComponent{MatchType: sluicev1.QuotaMatchType_QUOTA_MATCH_TYPE_DEFAULT}
	case name != "":
		return &sluicev1.QuotaFilterComponent{MatchType: sluicev1.QuotaMatchType_QUOTA_MATCH_TYPE_EXACT, Name: name}
	}
	return nil
}

func (e *env) quotaList(ctx context.Context, args []string) error {
	fs := e.newFlags("quota list", "quota list [--user U | --user-default] [--client-id C | --client-id-default]\n\n"+
		"Lists the entities with quotas (those matching the filters) and their quotas, as one broker's\n"+
		"metadata holds them.")
	ent := addQuotaEntityFlags(fs)
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if (*ent.user != "" && *ent.userDefault) || (*ent.clientID != "" && *ent.clientIDDefault) {
		return errors.New("quota list: a name and its default exclude each other")
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	entries, err := c.DescribeClientQuotas(ctx, &sluicev1.DescribeClientQuotasRequest{
		User: quotaFilter(*ent.user, *ent.userDefault), ClientId: quotaFilter(*ent.clientID, *ent.clientIDDefault)})
	if err != nil {
		return fmt.Errorf("quota list: %w", err)
	}
	rows := []output.ClientQuota{}
	for _, en := range entries {
		r := output.ClientQuota{User: nameString(en.Entity.GetUser()), ClientID: nameString(en.Entity.GetClientId()), Quotas: map[string]float64{}}
		for _, v := range en.Values {
			r.Quotas[v.Key] = v.Value
		}
		rows = append(rows, r)
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tCLIENT-ID\tPRODUCER_BYTE_RATE\tCONSUMER_BYTE_RATE\tREQUEST_PERCENTAGE")
	cell := func(q map[string]float64, k string) string {
		if v, ok := q[k]; ok {
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return "-"
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", dash(r.User), dash(r.ClientID), cell(r.Quotas, client.QuotaProducerByteRate),
			cell(r.Quotas, client.QuotaConsumerByteRate), cell(r.Quotas, client.QuotaRequestPercentage))
	}
	return tw.Flush()
}
