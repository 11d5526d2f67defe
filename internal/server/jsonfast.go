package server

import "encoding/json"

// decodeHeaderFast parses the JSON part of a typical request without
// reflection: the members the protocol defines, in lower case, once each,
// with strings of printable ASCII without escapes, shapes of plain
// integers and parameters whose values are true, false, integers or such
// strings. Anything else (inputs[].data, null, escapes, floats, other
// members, duplicates, malformed JSON) returns false, and the caller
// parses with encoding/json, which gives the same result for everything
// this accepts. Parameter values alias b.
func decodeHeaderFast(b []byte) (*jsonInferRequest, bool) {
	p := fastParser{b: b}
	var r jsonInferRequest
	var seen [4]bool
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return once(&seen[0]) && p.str(&r.ID)
		case "parameters":
			return once(&seen[1]) && p.params(&r.Parameters)
		case "inputs":
			r.Inputs = []jsonInput{}
			return once(&seen[2]) && p.array(func() bool {
				r.Inputs = append(r.Inputs, jsonInput{})
				return p.input(&r.Inputs[len(r.Inputs)-1])
			})
		case "outputs":
			r.Outputs = []jsonOutput{}
			return once(&seen[3]) && p.array(func() bool {
				r.Outputs = append(r.Outputs, jsonOutput{})
				return p.output(&r.Outputs[len(r.Outputs)-1])
			})
		}
		return false
	})
	p.space()
	if !ok || p.i != len(b) {
		return nil, false
	}
	return &r, true
}

func once(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c,
// consuming it if so.
func (p *fastParser) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object parses {"key": value, ...}, member calls parsing each value.
func (p *fastParser) object(member func(key []byte) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		p.space()
		key, ok := p.rawStr()
		if !ok || !p.next(':') || !member(key) {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// array parses [elem, ...].
func (p *fastParser) array(elem func() bool) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next(']')
	}
}

// rawStr parses a string of printable ASCII without escapes and returns
// its contents.
func (p *fastParser) rawStr() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return p.b[start:j], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func (p *fastParser) str(dst *string) bool {
	p.space()
	s, ok := p.rawStr()
	*dst = string(s)
	return ok
}

// int parses an integer without fraction or exponent that fits an int64.
func (p *fastParser) int() (int64, bool) {
	p.space()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var v uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if v > (1<<63-1)/10 {
			return 0, false
		}
		v = v*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	n := p.i - start
	switch {
	case n == 0, n > 1 && p.b[start] == '0', v > 1<<63-1:
		return 0, false
	case p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E'):
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// params parses an object of simple values into raw messages.
func (p *fastParser) params(dst *map[string]json.RawMessage) bool {
	m := map[string]json.RawMessage{}
	*dst = m
	return p.object(func(key []byte) bool {
		if _, dup := m[string(key)]; dup {
			return false
		}
		p.space()
		start := p.i
		switch {
		case p.i < len(p.b) && p.b[p.i] == '"':
			if _, ok := p.rawStr(); !ok {
				return false
			}
		case p.lit("true"), p.lit("false"):
		default:
			if _, ok := p.int(); !ok {
				return false
			}
		}
		m[string(key)] = p.b[start:p.i]
		return true
	})
}

// lit consumes the literal s.
func (p *fastParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

func (p *fastParser) input(in *jsonInput) bool {
	var seen [4]bool
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "name":
			return once(&seen[0]) && p.str(&in.Name)
		case "datatype":
			return once(&seen[1]) && p.str(&in.Datatype)
		case "shape":
			in.Shape = []int64{}
			return once(&seen[2]) && p.array(func() bool {
				v, ok := p.int()
				in.Shape = append(in.Shape, v)
				return ok
			})
		case "parameters":
			return once(&seen[3]) && p.params(&in.Parameters)
		}
		return false // "data" and anything else: encoding/json
	})
}

func (p *fastParser) output(o *jsonOutput) bool {
	var seen [2]bool
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "name":
			return once(&seen[0]) && p.str(&o.Name)
		case "parameters":
			return once(&seen[1]) && p.params(&o.Parameters)
		}
		return false
	})
}
