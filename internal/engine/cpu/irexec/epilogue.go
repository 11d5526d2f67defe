package irexec

import "goinfer/internal/ir"

// act is a fused op's activation, applied to finished output values.
type act struct {
	relu bool // the micro-kernel applies it in registers
	f    func(float32) float32
}

// newAct returns e's activation, computed with ir's own function of it
// (in float64); ok is false for a kind ir does not know.
func newAct(e ir.Epilogue) (act, bool) {
	switch e.Act {
	case ir.ActNone:
		return act{}, true
	case ir.ActRelu:
		return act{relu: true}, true
	}
	f, err := e.Func()
	if err != nil {
		return act{}, false
	}
	return act{f: f64fn(f)}, true
}

// apply runs the activation over v.
func (a act) apply(v []float32) {
	switch {
	case a.relu:
		for i, x := range v {
			v[i] = max(x, 0)
		}
	case a.f != nil:
		for i, x := range v {
			v[i] = a.f(x)
		}
	}
}

// none reports whether the activation is the identity.
func (a act) none() bool { return !a.relu && a.f == nil }
