package engine

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

var (
	mu       sync.RWMutex
	registry = map[string]Engine{}
)

// Register makes an engine selectable by name. Engine packages call it from
// init; registering a name twice is a programming error.
func Register(e Engine) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[e.Name()]; dup {
		panic("engine: Register called twice for " + e.Name())
	}
	registry[e.Name()] = e
}

// Names lists the registered engines.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	n := make([]string, 0, len(registry))
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Get returns the named engine, or an error listing the known ones.
func Get(name string) (Engine, error) {
	mu.RLock()
	e, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown engine %q (known: %s, auto)", name, strings.Join(Names(), ", "))
	}
	return e, nil
}

// Select resolves an --engine value. "auto" picks cuda when it is available
// and cpu otherwise; the returned note says which and why, for the user.
// A named engine that is not available is an error that says why.
func Select(name string) (e Engine, note string, err error) {
	if name != "auto" && name != "" {
		e, err := Get(name)
		if err != nil {
			return nil, "", err
		}
		if err := e.Available(); err != nil {
			return nil, "", fmt.Errorf("engine %s is not available: %w", name, err)
		}
		return e, "engine: " + name, nil
	}
	if cuda, err := Get("cuda"); err == nil {
		aerr := cuda.Available()
		if aerr == nil {
			return cuda, "engine: cuda (auto: a GPU and its libraries were found)", nil
		}
		note = fmt.Sprintf("engine: cpu (auto: cuda not usable: %s; 'goinfer doctor' says more)", firstClause(aerr.Error()))
	} else {
		note = "engine: cpu (auto: this build has no cuda engine)"
	}
	cpu, err := Get("cpu")
	if err != nil {
		return nil, "", err
	}
	return cpu, note, nil
}

// firstClause shortens a long diagnosis to its first clause, for a one-line
// note: the full text is what `goinfer doctor` prints.
func firstClause(s string) string {
	if i := strings.IndexAny(s, "(;\n"); i > 0 {
		s = strings.TrimSpace(s[:i])
	}
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
