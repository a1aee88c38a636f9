package api

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// LimitRequests returns a registrar that registers services on r with
// every request they receive, unary or on a stream, checked against the
// request limits (limits.go) before it is decoded: a request over one is
// refused with InvalidArgument INVALID_REQUEST (invalidRequest), naming
// the field and the bound, and its handler never runs (a stream ends with
// the refusal). The check walks the encoded request once and allocates
// nothing per entry, so a request of millions of entries costs its bytes
// and no more. Register every service of both listeners through it.
//
// r must register through a codec.Server (directly or under other
// wrappers): a refusal is the decoding's error, which codec.Server hands
// back to the method instead of letting gRPC answer Internal.
func LimitRequests(r grpc.ServiceRegistrar) grpc.ServiceRegistrar { return limitedRegistrar{r} }

type limitedRegistrar struct{ r grpc.ServiceRegistrar }

// RegisterService registers impl under a copy of desc whose handlers
// receive their requests through receiveChecked.
func (l limitedRegistrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	codec.RegisterHooked(l.r, desc, impl, codec.ReceiveHook{
		Unary: func(_ context.Context, dec func(any) error) (func(any) error, func()) {
			return func(v any) error { return receiveChecked(v, dec) }, nil
		},
		Stream: func(ss grpc.ServerStream, _ bool) (grpc.ServerStream, func()) { return checkedStream{ss}, nil },
	})
}

// checkedStream is a server stream whose requests go through
// receiveChecked.
type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error { return receiveChecked(m, s.ServerStream.RecvMsg) }

// receiveChecked receives the next request into v with recv, checking its
// bytes against the limits first; it returns the refusal (a *refusal) if
// they are over one, with v left as it was (but a ProduceStreamRequest's
// correlation id, so that the stream can answer the refusal).
func receiveChecked(v any, recv func(any) error) error {
	md := requestDescriptor(v)
	if md == nil {
		return recv(v)
	}
	c := &checkedRequest{msg: v, md: md}
	err := recv(c)
	if c.refused != nil {
		return c.refused
	}
	return err
}

// requestDescriptor is the message v's bytes are checked as: the server
// views for the requests decoded in place, else v's own.
func requestDescriptor(v any) protoreflect.MessageDescriptor {
	switch m := v.(type) {
	case *codec.ProduceRequest:
		return (*internalv1.ProduceRequestView)(nil).ProtoReflect().Descriptor()
	case *codec.ProduceStreamRequest:
		return (*internalv1.ProduceStreamRequestView)(nil).ProtoReflect().Descriptor()
	case proto.Message:
		return m.ProtoReflect().Descriptor()
	}
	return nil
}

// checkedRequest is what a limited method receives into: codec.Codec
// hands it the request's bytes (as to any codec.AliasUnmarshaler), which
// it checks, then decodes into msg.
type checkedRequest struct {
	msg     any
	md      protoreflect.MessageDescriptor
	refused *refusal // the limit the bytes are over
}

// Request is the request c decodes into, for stream wrappers outside the
// limits (metrics) that look at what was received.
func (c *checkedRequest) Request() any { return c.msg }

// UnmarshalAliased implements codec.AliasUnmarshaler.
func (c *checkedRequest) UnmarshalAliased(buf mem.Buffer) error {
	if err := checkRequest(c.md, buf.ReadOnlyData()); err != nil {
		if r, ok := c.msg.(*codec.ProduceStreamRequest); ok {
			// The stream answers the refusal under the request's id.
			r.CorrelationID = correlationID(buf.ReadOnlyData())
		}
		buf.Free()
		c.refused = &refusal{status.Convert(err)}
		return err
	}
	if a, ok := c.msg.(codec.AliasUnmarshaler); ok {
		return a.UnmarshalAliased(buf) // buf is a's now
	}
	defer buf.Free()
	m, ok := c.msg.(proto.Message)
	if !ok {
		return fmt.Errorf("cannot decode into %T: not a proto.Message", c.msg)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// refusal is the error of a request refused by the limits: an
// InvalidArgument INVALID_REQUEST status.
type refusal struct{ st *status.Status }

func (r *refusal) Error() string              { return r.st.Err().Error() }
func (r *refusal) GRPCStatus() *status.Status { return r.st }

// correlationID is the correlation_id (field 1) of an encoded
// ProduceStreamRequest, 0 if it has none that decodes.
func correlationID(b []byte) int64 {
	var id int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return id
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return id
			}
			id, b = int64(v), b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return id
		}
		b = b[n:]
	}
	return id
}

// checkRequest checks the encoded request b, a message of type md,
// against the limits. Bytes that are no valid encoding are left to the
// decoder to refuse: everything before the fault is within the limits.
func checkRequest(md protoreflect.MessageDescriptor, b []byte) error {
	s := scanners.Get().(*scanner)
	defer s.release()
	_, err := s.scan(planFor(md), 0, b, nil, nil)
	if err == nil || err == errMalformed {
		return nil
	}
	return invalidRequest("request refused: %v (docs/operations.md, Limits)", err)
}

// A plan is a request message type compiled for the check.
type msgPlan struct {
	name      string
	fields    []*fieldPlan // by field number
	nRepeated int          // per-message counters (fieldPlan.rep)
	nUnique   int          // per-message duplicate sets (fieldPlan.uniq)
}

// fieldPlan is one field of a msgPlan and its bound.
type fieldPlan struct {
	name     string
	owner    string // the message's name
	limit    fieldLimit
	wire     protowire.Type // of one element
	kind     protoreflect.Kind
	repeated bool // a list or a map
	packable bool // a repeated number: packed or not
	rep      int  // index of its counter, if repeated
	uniq     int  // index of its duplicate set, or -1
	str      bool // a string field
	maxLen   int  // its bound, or 0
	child    *msgPlan
	keys     []keyField // identify a message element (limit.Key)
}

// keyField is a field that identifies a message element.
type keyField struct {
	num  protowire.Number
	name string
	kind protoreflect.Kind
}

var plans sync.Map // protoreflect.FullName -> *msgPlan

func planFor(md protoreflect.MessageDescriptor) *msgPlan {
	if p, ok := plans.Load(md.FullName()); ok {
		return p.(*msgPlan)
	}
	p, _ := plans.LoadOrStore(md.FullName(), compilePlan(md, map[protoreflect.FullName]*msgPlan{}))
	return p.(*msgPlan)
}

func compilePlan(md protoreflect.MessageDescriptor, building map[protoreflect.FullName]*msgPlan) *msgPlan {
	if p := building[md.FullName()]; p != nil {
		return p
	}
	name := string(md.Name())
	if md.ParentFile().Package() == "sluice.internal.v1" {
		// A server view is named as the public message it stands for
		// (view.proto): that is what the client sent.
		name = strings.TrimSuffix(name, "View")
	}
	p := &msgPlan{name: name}
	building[md.FullName()] = p
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		lim, listed := requestLimits[fd.FullName()]
		fp := &fieldPlan{name: string(fd.Name()), owner: p.name, kind: fd.Kind(), wire: wireType(fd.Kind()), uniq: -1}
		if fd.IsList() || fd.IsMap() {
			if !listed || lim.Max <= 0 {
				lim.Max, lim.Why = defaultLimit.Max, defaultLimit.Why
			}
			fp.repeated, fp.rep = true, p.nRepeated
			p.nRepeated++
			fp.packable = fd.IsList() && fp.wire != protowire.BytesType && fp.wire != protowire.StartGroupType
			if lim.Unique {
				fp.uniq = p.nUnique
				p.nUnique++
			}
		}
		fp.limit = lim
		if fd.Kind() == protoreflect.StringKind {
			fp.str, fp.maxLen = true, lim.MaxLen
		}
		if m := fd.Message(); m != nil {
			fp.child = compilePlan(m, building)
			for _, k := range lim.Key {
				if kf := m.Fields().ByNumber(k); kf != nil {
					fp.keys = append(fp.keys, keyField{num: k, name: string(kf.Name()), kind: kf.Kind()})
				}
			}
		}
		for len(p.fields) <= int(fd.Number()) {
			p.fields = append(p.fields, nil)
		}
		p.fields[fd.Number()] = fp
	}
	return p
}

// field is p's field num, or nil.
func (p *msgPlan) field(num protowire.Number) *fieldPlan {
	if int(num) < len(p.fields) {
		return p.fields[num]
	}
	return nil
}

// wireType is the wire type of one value of kind k.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// errMalformed stops a check at bytes that are no valid encoding.
var errMalformed = fmt.Errorf("malformed")

// scanner is the state of one check; scanners reuses them, so that the
// check of a request allocates nothing in the steady state.
type scanner struct {
	totals   map[*fieldPlan]int
	strBytes int
	path     []pathStep
	insts    []*instance // by depth
	root     string
}

var scanners = sync.Pool{New: func() any { return &scanner{totals: map[*fieldPlan]int{}} }}

// release clears s (it must not keep a request's bytes) and pools it.
func (s *scanner) release() {
	clear(s.totals)
	s.strBytes, s.path, s.root = 0, s.path[:0], ""
	for _, in := range s.insts {
		in.reset(0, 0)
	}
	scanners.Put(s)
}

// pathStep is a field of the message being checked, with the element's
// index (-1 for a singular field), for refusals.
type pathStep struct {
	fp    *fieldPlan
	index int
}

// instance is the per-message state of a check at one depth.
type instance struct {
	counts  []int
	sets    []dupSet
	singles []singleField
}

// singleField is a singular message field: all its occurrences in a
// message are merged by the decoder, so they are checked as one message.
type singleField struct {
	fp   *fieldPlan
	segs [][]byte
}

func (in *instance) reset(repeated, unique int) {
	if cap(in.counts) < repeated {
		in.counts = make([]int, repeated)
	}
	in.counts = in.counts[:repeated]
	clear(in.counts)
	for i := range in.sets {
		in.sets[i].reset()
	}
	for len(in.sets) < unique {
		in.sets = append(in.sets, dupSet{})
	}
	clear(in.singles)
	in.singles = in.singles[:0]
}

func (s *scanner) instance(depth int, p *msgPlan) *instance {
	for len(s.insts) <= depth {
		s.insts = append(s.insts, &instance{})
	}
	in := s.insts[depth]
	in.reset(p.nRepeated, p.nUnique)
	return in
}

// scan checks one message of plan p whose encoding is the concatenation
// of first and more (one message, or the merged occurrences of a singular
// field), and returns the values of its key fields. (Not one [][]byte:
// a slice made for each element would escape, through the recursion, to
// the heap.)
func (s *scanner) scan(p *msgPlan, depth int, first []byte, more [][]byte, keys []keyField) (keyVal, error) {
	if depth == 0 {
		s.root = p.name
	}
	in := s.instance(depth, p)
	if p.nRepeated > 0 {
		// Count the lists first: one too long is refused before its
		// elements are compared with each other.
		if err := s.precount(p, in, first, more); err != nil {
			return keyVal{}, err
		}
	}
	var key keyVal
	for i := -1; i < len(more); i++ {
		b := first
		if i >= 0 {
			b = more[i]
		}
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return key, errMalformed
			}
			b = b[n:]
			fp := p.field(num)
			if fp == nil || (typ != fp.wire && !(fp.packable && typ == protowire.BytesType)) {
				// Not a field of p, or not as p has it: the decoder keeps
				// it as an unknown field, bytes and no more.
				if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
					return key, errMalformed
				}
				b = b[n:]
				continue
			}
			if fp.packable && typ == protowire.BytesType {
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return key, errMalformed
				}
				b = b[n:]
				if err := s.packed(in, fp, v); err != nil {
					return key, err
				}
				continue
			}
			var val keyPart
			switch typ {
			case protowire.VarintType:
				v, n := protowire.ConsumeVarint(b)
				if n < 0 {
					return key, errMalformed
				}
				b, val.n = b[n:], normalize(fp.kind, v)
			case protowire.Fixed32Type:
				v, n := protowire.ConsumeFixed32(b)
				if n < 0 {
					return key, errMalformed
				}
				b, val.n = b[n:], uint64(v)
			case protowire.Fixed64Type:
				v, n := protowire.ConsumeFixed64(b)
				if n < 0 {
					return key, errMalformed
				}
				b, val.n = b[n:], v
			case protowire.BytesType:
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return key, errMalformed
				}
				b, val.s = b[n:], v
			default: // a group
				n := protowire.ConsumeFieldValue(num, typ, b)
				if n < 0 {
					return key, errMalformed
				}
				b = b[n:]
				continue
			}
			index := -1
			if fp.repeated {
				index = in.counts[fp.rep]
				if err := s.count(in, fp); err != nil {
					return key, err
				}
			}
			if fp.str {
				if err := s.str(fp, index, len(val.s)); err != nil {
					return key, err
				}
			}
			switch {
			case fp.child != nil && fp.repeated:
				s.path = append(s.path, pathStep{fp, index})
				ek, err := s.scan(fp.child, depth+1, val.s, nil, fp.keys)
				if err == nil && fp.uniq >= 0 && in.sets[fp.uniq].add(ek) {
					err = s.refuse("%s repeats %s", s.where(), ek.describe(fp.keys))
				}
				s.path = s.path[:len(s.path)-1]
				if err != nil {
					return key, err
				}
			case fp.child != nil:
				in.addSingle(fp, val.s)
			case fp.uniq >= 0:
				if in.sets[fp.uniq].add(keyVal{val}) {
					return key, s.refuse("%s%s[%d] repeats %s", s.where(), "."+fp.name, index, describeValue(fp.kind, val))
				}
			}
			for i, k := range keys {
				if k.num == num {
					key[i] = val
				}
			}
		}
	}
	for _, sf := range in.singles {
		s.path = append(s.path, pathStep{sf.fp, -1})
		_, err := s.scan(sf.fp.child, depth+1, nil, sf.segs, nil)
		s.path = s.path[:len(s.path)-1]
		if err != nil {
			return key, err
		}
	}
	return key, nil
}

// precount checks the length of every repeated field of one message of
// plan p (encoded as for scan), and leaves in's counters at zero.
func (s *scanner) precount(p *msgPlan, in *instance, first []byte, more [][]byte) error {
	defer clear(in.counts)
	for i := -1; i < len(more); i++ {
		b := first
		if i >= 0 {
			b = more[i]
		}
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
			v := b
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errMalformed
			}
			b = b[n:]
			fp := p.field(num)
			if fp == nil || !fp.repeated {
				continue
			}
			switch {
			case typ == fp.wire:
				in.counts[fp.rep]++
			case fp.packable && typ == protowire.BytesType:
				v, _ = protowire.ConsumeBytes(v)
				switch fp.wire {
				case protowire.Fixed32Type:
					in.counts[fp.rep] += len(v) / 4
				case protowire.Fixed64Type:
					in.counts[fp.rep] += len(v) / 8
				default:
					for _, c := range v {
						if c < 0x80 { // the last byte of a varint
							in.counts[fp.rep]++
						}
					}
				}
			default:
				continue
			}
			if in.counts[fp.rep] > fp.limit.Max {
				return s.refuse("%s.%s has more than %d entries (at most %d %s)", s.where(), fp.name, fp.limit.Max, fp.limit.Max, fp.limit.Why)
			}
		}
	}
	return nil
}

func (in *instance) addSingle(fp *fieldPlan, b []byte) {
	for i := range in.singles {
		if in.singles[i].fp == fp {
			in.singles[i].segs = append(in.singles[i].segs, b)
			return
		}
	}
	in.singles = append(in.singles, singleField{fp: fp, segs: [][]byte{b}})
}

// packed checks the elements of a packed repeated number field.
func (s *scanner) packed(in *instance, fp *fieldPlan, b []byte) error {
	for len(b) > 0 {
		var v uint64
		switch fp.wire {
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformed
			}
			b, v = b[n:], normalize(fp.kind, x)
		case protowire.Fixed32Type:
			x, n := protowire.ConsumeFixed32(b)
			if n < 0 {
				return errMalformed
			}
			b, v = b[n:], uint64(x)
		default:
			x, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return errMalformed
			}
			b, v = b[n:], x
		}
		index := in.counts[fp.rep]
		if err := s.count(in, fp); err != nil {
			return err
		}
		if fp.uniq >= 0 && in.sets[fp.uniq].add(keyVal{{n: v}}) {
			return s.refuse("%s.%s[%d] repeats %s", s.where(), fp.name, index, describeValue(fp.kind, keyPart{n: v}))
		}
	}
	return nil
}

// count adds an element of the repeated field fp.
func (s *scanner) count(in *instance, fp *fieldPlan) error {
	in.counts[fp.rep]++
	if in.counts[fp.rep] > fp.limit.Max {
		return s.refuse("%s.%s has more than %d entries (at most %d %s)", s.where(), fp.name, fp.limit.Max, fp.limit.Max, fp.limit.Why)
	}
	if fp.limit.Total > 0 {
		s.totals[fp]++
		if s.totals[fp] > fp.limit.Total {
			return s.refuse("%s has more than %d %s.%s entries in all (at most %d %s)", s.root, fp.limit.Total, fp.owner, fp.name, fp.limit.Total, fp.limit.TotalWhy)
		}
	}
	return nil
}

// str checks one value of the string field fp.
func (s *scanner) str(fp *fieldPlan, index, n int) error {
	if fp.maxLen > 0 && n > fp.maxLen {
		at := s.where() + "." + fp.name
		if index >= 0 {
			at += "[" + strconv.Itoa(index) + "]"
		}
		return s.refuse("%s is %d bytes long (at most %d)", at, n, fp.maxLen)
	}
	s.strBytes += n
	if s.strBytes > MaxRequestStringBytes {
		return s.refuse("its strings are more than %d bytes in all", MaxRequestStringBytes)
	}
	return nil
}

// where is the path of the message being checked: "FetchRequest.topics[2]".
func (s *scanner) where() string {
	var b strings.Builder
	b.WriteString(s.root)
	for _, st := range s.path {
		b.WriteString("." + st.fp.name)
		if st.index >= 0 {
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
		}
	}
	return b.String()
}

// limitError is a limit a request is over.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

func (s *scanner) refuse(format string, args ...any) error {
	return &limitError{msg: fmt.Sprintf(format, args...)}
}

// normalize is a varint as the decoder has a field of kind k: 32-bit
// kinds are truncated, zigzag kinds decoded.
func normalize(k protoreflect.Kind, v uint64) uint64 {
	switch k {
	case protoreflect.Int32Kind, protoreflect.EnumKind:
		return uint64(int64(int32(v)))
	case protoreflect.Uint32Kind:
		return uint64(uint32(v))
	case protoreflect.Sint32Kind:
		return uint64(int64(int32(protowire.DecodeZigZag(v & 0xffffffff))))
	case protoreflect.Sint64Kind:
		return uint64(protowire.DecodeZigZag(v))
	case protoreflect.BoolKind:
		if v != 0 {
			return 1
		}
	}
	return v
}

// keyPart is one value: a number (normalized) or a string's bytes (a
// slice of the request).
type keyPart struct {
	s []byte
	n uint64
}

// keyVal identifies an element: up to two key fields' values.
type keyVal [2]keyPart

func (k *keyVal) equal(o *keyVal) bool {
	return k[0].n == o[0].n && k[1].n == o[1].n && string(k[0].s) == string(o[0].s) && string(k[1].s) == string(o[1].s)
}

var keySeed = maphash.MakeSeed()

func (k *keyVal) hash() uint64 {
	var h maphash.Hash
	h.SetSeed(keySeed)
	var n [8]byte
	for _, p := range k {
		h.Write(p.s)
		binary.LittleEndian.PutUint64(n[:], p.n)
		h.Write(n[:])
		h.WriteByte(0)
	}
	return h.Sum64()
}

// describe names a message element by its key fields: `name "t"`.
func (k *keyVal) describe(keys []keyField) string {
	parts := make([]string, len(keys))
	for i, kf := range keys {
		parts[i] = kf.name + " " + describeValue(kf.kind, k[i])
	}
	return strings.Join(parts, ", ")
}

func describeValue(kind protoreflect.Kind, v keyPart) string {
	switch kind {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return fmt.Sprintf("%q", errs.Echo(v.s))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(v.n, 10)
	}
	return strconv.FormatInt(int64(v.n), 10)
}

// dupSet holds the elements of one repeated field of one message, to find
// a repeated one. Most lists have one element: the map is made at the
// second.
type dupSet struct {
	first map[uint64]int32 // hash -> index in keys of the first key with it
	keys  []keyVal
}

// add reports whether k is in d already, and adds it if not.
func (d *dupSet) add(k keyVal) bool {
	if len(d.keys) == 1 {
		if d.first == nil {
			d.first = map[uint64]int32{}
		}
		d.first[d.keys[0].hash()] = 0
	}
	if len(d.keys) > 0 {
		h := k.hash()
		if i, ok := d.first[h]; ok {
			// Equal, or a 64-bit hash collision: then compare with all.
			if d.keys[i].equal(&k) {
				return true
			}
			for j := range d.keys {
				if d.keys[j].equal(&k) {
					return true
				}
			}
		} else {
			d.first[h] = int32(len(d.keys))
		}
	}
	d.keys = append(d.keys, k)
	return false
}

func (d *dupSet) reset() {
	clear(d.first)
	clear(d.keys) // no request bytes kept
	d.keys = d.keys[:0]
}
