//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"goinfer/internal/checkpoint"
	"goinfer/internal/model"
	"goinfer/internal/server"
	"goinfer/internal/tensor"
)

func init() {
	register(command{
		name:    "soak",
		summary: "attack a local serve child with hostile and normal clients, then drain it under load (Linux, loopback)",
		run:     runSoak,
	})
}

const soakHelp = `Usage: goinfer soak [flags]

Starts "goinfer serve" as a child process on the cpu engine (a narrow ResNet
with seeded random weights, on loopback), and for --duration runs normal
clients that check every answer (the request id, and the logits against
those of the same image sent alone) beside hostile ones:

  - connections that send a body of 255 MiB and hold its last byte,
  - connections that send only headers claiming a 256 MiB body,
  - connections that send 10 of 1,000 declared bytes,
  - small JSON requests that declare a huge input shape.

It then puts --drain_clients keep-alive clients on the server, sends it
SIGTERM, and counts how the drain treats them: clients stop at the first 503
that says the server is shutting down, as a load balancer would.

It reports requests, answers, 503s, lost requests (no HTTP answer) and
mismatched answers (both must be 0), the server's peak RSS (VmHWM), the
drain time and transport errors at SIGTERM, into --out/<time>.md, with the
child's log in --out/<time>.log. It exits 1 when a check fails. Everything
stays on 127.0.0.1 and ends within about --duration + 40 s.

Flags:
`

type soakOptions struct {
	duration     time.Duration
	clients      int
	drainClients int
	drainLoad    time.Duration
	bigBodies    int
	headerOnly   int
	slowBodies   int
	shapeClients int
	imageSize    int
	threads      int
	serverBin    string
	serveFlags   string
	out          string
	maxRSS       int64
}

func (o *soakOptions) register(fs *flag.FlagSet) {
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "how long the attack phase lasts")
	fs.IntVar(&o.clients, "clients", 16, "normal clients during the attack")
	fs.IntVar(&o.drainClients, "drain_clients", 200, "keep-alive clients on the server when it gets SIGTERM")
	fs.DurationVar(&o.drainLoad, "drain_load", 5*time.Second, "how long the drain clients run before SIGTERM")
	fs.IntVar(&o.bigBodies, "big_bodies", 40, "connections sending 255 MiB bodies and holding the last byte")
	fs.IntVar(&o.headerOnly, "header_only", 40, "connections sending only headers that claim 256 MiB")
	fs.IntVar(&o.slowBodies, "slow_bodies", 10, "connections sending 10 of 1,000 declared bytes")
	fs.IntVar(&o.shapeClients, "shape_clients", 4, "clients sending 86-byte JSON requests that declare a batch of 256 images")
	fs.IntVar(&o.imageSize, "image_size", 64, "image height and width the child serves")
	fs.IntVar(&o.threads, "threads", 0, "cpu engine threads of the child (0: all cores)")
	fs.StringVar(&o.serverBin, "server_bin", "", "goinfer `BINARY` to run as the server (default: this one), e.g. an older build to compare")
	fs.StringVar(&o.serveFlags, "serve_flags", "--read_timeout 15s", "extra serve `FLAGS`, space-separated (the default shortens --read_timeout so that the slow bodies are cut off within the run)")
	fs.StringVar(&o.out, "out", filepath.Join("results", "soak"), "`DIR` for the report and the server's log")
	fs.Int64Var(&o.maxRSS, "max_rss", 1536<<20, "peak server RSS in `BYTES` above which the soak fails")
}

func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o soakOptions
	fs := newFlagSet("soak", "soak [flags]", stderr)
	o.register(fs)
	if _, err := parseWithHelp(fs, soakHelp, args); err != nil {
		return err
	}
	switch {
	case o.duration < 5*time.Second || o.duration > 30*time.Minute:
		fmt.Fprintf(stderr, "goinfer soak: --duration %v: want 5s to 30m\n", o.duration)
		return errUsage
	case o.clients < 1 || o.drainClients < 1:
		fmt.Fprintln(stderr, "goinfer soak: --clients and --drain_clients must be at least 1")
		return errUsage
	case o.bigBodies < 0 || o.headerOnly < 0 || o.slowBodies < 0 || o.shapeClients < 0:
		fmt.Fprintln(stderr, "goinfer soak: attacker counts must not be negative")
		return errUsage
	case o.imageSize < 8:
		fmt.Fprintf(stderr, "goinfer soak: --image_size %d: want at least 8\n", o.imageSize)
		return errUsage
	}
	s := &soak{o: o, progress: stderr}
	rep, err := s.run(ctx)
	if rep != "" {
		fmt.Fprint(stdout, rep)
	}
	return err
}

// soak is one run.
type soak struct {
	o        soakOptions
	progress io.Writer
	logMu    sync.Mutex
	log      *os.File // the child's log and the soak's progress

	addr   string // the child's HTTP address
	model  string
	images [][]byte    // request images, FP32 bytes
	want   [][]float32 // their logits, sent alone

	normal  tally // normal clients, attack phase
	drain   tally // drain clients
	attacks attackTally

	mu        sync.Mutex
	latencies []time.Duration // answered normal requests, attack phase
}

// tally counts what normal clients saw.
type tally struct {
	sent, answered, mismatched, lost atomic.Int64
	queueFull, memoryFull, draining  atomic.Int64
	other                            atomic.Int64 // any other status
	lostAfterSIGTERM                 atomic.Int64
	errKinds                         sync.Map     // transport error kind -> *atomic.Int64
	drainNoClose                     atomic.Int64 // a draining 503 without Connection: close
	firstLost                        atomic.Pointer[string]
}

// attackTally counts what the hostile clients saw.
type attackTally struct {
	bigRefused, bigCut, bigOther, bigHeld atomic.Int64
	hdrRefused, hdrCut, hdrOther, hdrHeld atomic.Int64
	slowCut, slowOther, slowHeld          atomic.Int64
	slowMaxWait                           atomic.Int64 // ns
	shapeRefused, shapeOther, shapeBytes  atomic.Int64
	firstOther                            atomic.Pointer[string]
}

// other counts an attack that ended other than expected, keeping the first
// such outcome for the report.
func (a *attackTally) other(c *atomic.Int64, what string, st int, err error) {
	c.Add(1)
	msg := fmt.Sprintf("%s: status %d, %v", what, st, err)
	a.firstOther.CompareAndSwap(nil, &msg)
}

func (s *soak) logf(format string, args ...any) {
	line := fmt.Sprintf("%s soak: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	fmt.Fprint(s.progress, line)
	s.logMu.Lock()
	s.log.WriteString(line)
	s.logMu.Unlock()
}

func (s *soak) run(ctx context.Context) (string, error) {
	o := s.o
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return "", err
	}
	stamp := time.Now().UTC().Format("2006-01-02T1504Z")
	base := filepath.Join(o.out, stamp)
	var err error
	if s.log, err = os.Create(base + ".log"); err != nil {
		return "", err
	}
	defer s.log.Close()

	tmp, err := os.MkdirTemp("", "goinfer-soak-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ckpt, err := writeSoakCheckpoint(tmp)
	if err != nil {
		return "", err
	}
	bin := o.serverBin
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return "", err
		}
	}
	args := []string{"serve", "--checkpoint", ckpt, "--engine", "cpu", "--image_size", strconv.Itoa(o.imageSize),
		"--threads", strconv.Itoa(o.threads), "--http", "127.0.0.1:0", "--grpc", "", "--log_format", "json"}
	args = append(args, strings.Fields(o.serveFlags)...)
	// The child must not outlive a soak that dies: Pdeathsig kills it.
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	childErr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	s.logf("starting %s %s", bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	ready := make(chan map[string]any, 1)
	drained := make(chan map[string]any, 1)
	go s.readChildLog(childErr, ready, drained)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	}()

	select {
	case m := <-ready:
		s.addr, _ = m["http"].(string)
		s.model, _ = m["model"].(string)
	case err := <-exited:
		return "", fmt.Errorf("the server exited before it was ready: %v (log: %s.log)", err, base)
	case <-time.After(2 * time.Minute):
		return "", errors.New("the server was not ready within 2 minutes")
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if !strings.HasPrefix(s.addr, "127.0.0.1:") {
		return "", fmt.Errorf("the server listens on %q, not loopback", s.addr)
	}
	pid := cmd.Process.Pid
	s.logf("server pid %d ready on %s", pid, s.addr)

	rss := &rssWatch{pid: pid}
	rssDone := make(chan struct{})
	go rss.poll(rssDone, s)
	defer close(rssDone)

	if err := s.expected(ctx); err != nil {
		return "", err
	}

	// Attack phase.
	tr := &http.Transport{MaxIdleConnsPerHost: o.drainClients + o.clients, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	actx, stopAttack := context.WithTimeout(ctx, o.duration)
	var wg sync.WaitGroup
	s.logf("attack phase: %d normal clients, %d big bodies, %d header-only, %d slow bodies, %d shape clients, %v",
		o.clients, o.bigBodies, o.headerOnly, o.slowBodies, o.shapeClients, o.duration)
	attackStart := time.Now()
	for i := range o.clients {
		wg.Go(func() { s.normalClient(actx, client, i, &s.normal, nil) })
	}
	var hostile sync.WaitGroup
	for range o.bigBodies {
		hostile.Go(func() { s.bigBody(actx) })
	}
	for range o.headerOnly {
		hostile.Go(func() { s.headerOnlyBody(actx) })
	}
	for range o.slowBodies {
		hostile.Go(func() { s.slowBody(actx) })
	}
	for range o.shapeClients {
		hostile.Go(func() { s.shapeAttack(actx, client) })
	}
	<-actx.Done()
	stopAttack()
	wg.Wait()
	hostile.Wait()
	attackTook := time.Since(attackStart)
	attackHWM := rss.hwm.Load()
	s.logf("attack phase over after %v: %d answered, peak RSS so far %s", attackTook.Round(time.Millisecond), s.normal.answered.Load(), rssMiB(attackHWM))
	if ctx.Err() != nil {
		return "", ctx.Err()
	}

	// Drain phase: many keep-alive clients, then SIGTERM.
	dctx, stopDrain := context.WithCancel(ctx)
	defer stopDrain()
	var sigterm atomic.Bool
	for i := range o.drainClients {
		wg.Go(func() { s.normalClient(dctx, client, 10000+i, &s.drain, &sigterm) })
	}
	time.Sleep(o.drainLoad)
	s.logf("SIGTERM under %d clients (%d answered so far in this phase)", o.drainClients, s.drain.answered.Load())
	finalHWM := rss.read()
	sigterm.Store(true)
	termAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return "", err
	}
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-time.After(40 * time.Second):
		cmd.Process.Kill()
		exitErr = errors.New("did not exit within 40 s of SIGTERM; killed")
		<-exited
	}
	exitTook := time.Since(termAt)
	// Clients still looping after the exit can only fail: stop them.
	waitClients := make(chan struct{})
	go func() { wg.Wait(); close(waitClients) }()
	select {
	case <-waitClients:
	case <-time.After(2 * time.Second):
		stopDrain()
		<-waitClients
	}
	var drainTook string
	select {
	case m := <-drained:
		// slog's JSON handler writes durations in nanoseconds.
		if ns, ok := m["took"].(float64); ok {
			drainTook = time.Duration(ns).Round(time.Millisecond).String()
		}
	default:
		drainTook = "(no \"drained\" log line)"
	}
	s.logf("server exited %v after SIGTERM (%v); drain %s", exitTook.Round(time.Millisecond), exitErr, drainTook)
	return s.report(base, stamp, attackTook, max(attackHWM, finalHWM), rss.maxRSS.Load(), drainTook, exitTook, exitErr)
}

// readChildLog copies the child's log and picks out the lines the soak
// waits for.
func (s *soak) readChildLog(r io.Reader, ready, drained chan<- map[string]any) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		s.logMu.Lock()
		s.log.Write(line)
		s.log.WriteString("\n")
		s.logMu.Unlock()
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		switch m["msg"] {
		case "ready":
			ready <- m
		case "drained":
			drained <- m
		}
	}
}

// expected sends each image alone and keeps its logits as the answer every
// later request of it must get.
func (s *soak) expected(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(5, 6))
	n := 3 * s.o.imageSize * s.o.imageSize
	for range 16 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		s.images = append(s.images, tensor.F32Bytes(x))
	}
	c := &http.Client{Timeout: 30 * time.Second}
	for i, img := range s.images {
		r, err := s.infer(ctx, c, "warmup-"+strconv.Itoa(i), img)
		if err != nil {
			return fmt.Errorf("warm-up request %d: %w", i, err)
		}
		if r.status != 200 {
			return fmt.Errorf("warm-up request %d: %d %s", i, r.status, r.msg)
		}
		s.want = append(s.want, r.logits)
	}
	return nil
}

// answer is one response of the server, as far as the soak reads it.
type answer struct {
	status int
	id     string
	logits []float32
	msg    string // the error message
	close  bool   // Connection: close
}

func (s *soak) infer(ctx context.Context, c *http.Client, id string, img []byte) (answer, error) {
	hdr, err := json.Marshal(map[string]any{
		"id": id,
		"inputs": []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{1, 3, s.o.imageSize, s.o.imageSize},
			"parameters": map[string]any{"binary_data_size": len(img)}}},
	})
	if err != nil {
		return answer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+s.addr+"/v2/models/"+s.model+"/infer",
		io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(img)))
	if err != nil {
		return answer{}, err
	}
	req.ContentLength = int64(len(hdr) + len(img))
	req.Header.Set(server.HeaderContentLength, strconv.Itoa(len(hdr)))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, close: resp.Close}
	if a.status != 200 {
		var e struct{ Error string }
		json.Unmarshal(body, &e)
		a.msg = e.Error
		return a, nil
	}
	var ok struct {
		ID      string `json:"id"`
		Outputs []struct {
			Data []float32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(body, &ok); err != nil || len(ok.Outputs) != 1 {
		return a, fmt.Errorf("malformed answer %.200q", body)
	}
	a.id, a.logits = ok.ID, ok.Outputs[0].Data
	return a, nil
}

// normalClient sends requests until ctx ends, checking each answer. Once
// sigterm is set, a 503 that says the server is shutting down stops it.
func (s *soak) normalClient(ctx context.Context, c *http.Client, who int, t *tally, sigterm *atomic.Bool) {
	for i := 0; ctx.Err() == nil; i++ {
		k := (who + i) % len(s.images)
		id := fmt.Sprintf("c%d-r%d", who, i)
		t.sent.Add(1)
		start := time.Now()
		a, err := s.infer(ctx, c, id, s.images[k])
		switch {
		case err != nil && ctx.Err() != nil:
			t.sent.Add(-1) // the soak stopped it, not the server
			return
		case err != nil:
			t.lost.Add(1)
			v, _ := t.errKinds.LoadOrStore(transportErrorKind(err), new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			msg := fmt.Sprintf("%s: %v", id, err)
			t.firstLost.CompareAndSwap(nil, &msg)
			if sigterm != nil && sigterm.Load() {
				// A client that fails over to another server: it counts
				// once.
				t.lostAfterSIGTERM.Add(1)
				return
			}
			time.Sleep(50 * time.Millisecond)
		case a.status == 200:
			if a.id != id || !closeTo(a.logits, s.want[k]) {
				t.mismatched.Add(1)
				continue
			}
			t.answered.Add(1)
			if sigterm == nil {
				s.mu.Lock()
				s.latencies = append(s.latencies, time.Since(start))
				s.mu.Unlock()
			}
		case a.status == 503 && strings.Contains(a.msg, "shutting down"):
			t.draining.Add(1)
			if !a.close {
				t.drainNoClose.Add(1)
			}
			return // as a load balancer would take the server out
		case a.status == 503 && strings.Contains(a.msg, "max_inflight_bytes"):
			t.memoryFull.Add(1)
			time.Sleep(20 * time.Millisecond)
		case a.status == 503:
			t.queueFull.Add(1)
			time.Sleep(20 * time.Millisecond)
		default:
			t.other.Add(1)
			msg := fmt.Sprintf("%s: %d %s", id, a.status, a.msg)
			t.firstLost.CompareAndSwap(nil, &msg)
		}
	}
}

// transportErrorKind names what kind of transport error err is.
func transportErrorKind(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed before the answer (EOF)"
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return "timeout"
	case strings.Contains(err.Error(), "server closed idle connection"):
		return "idle connection closed under the request"
	}
	return "other"
}

// errorKinds formats a tally's transport errors by kind.
func (t *tally) errorKinds() string {
	var parts []string
	t.errKinds.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// closeTo compares logits of the same image from different batches.
func closeTo(got, want []float32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-3*max(1, math.Abs(float64(want[i]))) {
			return false
		}
	}
	return true
}

// rawAttack opens a connection, sends a request's headers declaring a body
// of length bytes, then the first sent bytes of that body (in 1 MiB writes),
// and waits for an answer or the end of ctx. It returns the status (0: none,
// the connection failed or ctx ended) and how long the answer took after
// the headers.
func (s *soak) rawAttack(ctx context.Context, length, sent int64) (int, time.Duration, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	start := time.Now()
	fmt.Fprintf(c, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", s.model, s.addr, length)
	type result struct {
		status int
		err    error
	}
	status := make(chan result, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			status <- result{0, err}
			return
		}
		resp.Body.Close()
		status <- result{resp.StatusCode, nil}
	}()
	sp := spaces()
	for sent > 0 {
		n := min(sent, int64(len(sp)))
		if _, err := c.Write(sp[:n]); err != nil {
			break
		}
		sent -= n
	}
	r := <-status
	return r.status, time.Since(start), r.err
}

// spaces is a JSON body's worth of whitespace, shared by the attackers;
// made on first use, not at every start of the binary (a MiB of fresh
// pages is milliseconds of page faults on a VM).
var spaces = sync.OnceValue(func() []byte { return bytes.Repeat([]byte{' '}, 1<<20) })

// pause sleeps d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// bigBody sends 255 MiB bodies and holds the last byte.
func (s *soak) bigBody(ctx context.Context) {
	for ctx.Err() == nil {
		st, _, err := s.rawAttack(ctx, 255<<20, 255<<20-1)
		switch {
		case ctx.Err() != nil:
			if st == 0 {
				s.attacks.bigHeld.Add(1)
			}
		case st == 503:
			s.attacks.bigRefused.Add(1)
		case st == 408:
			s.attacks.bigCut.Add(1)
		default:
			s.attacks.other(&s.attacks.bigOther, "255 MiB body", st, err)
		}
		pause(ctx, 200*time.Millisecond)
	}
}

// headerOnlyBody claims 256 MiB and sends nothing.
func (s *soak) headerOnlyBody(ctx context.Context) {
	for ctx.Err() == nil {
		st, _, err := s.rawAttack(ctx, 256<<20, 0)
		switch {
		case ctx.Err() != nil:
			if st == 0 {
				s.attacks.hdrHeld.Add(1)
			}
		case st == 503:
			s.attacks.hdrRefused.Add(1)
		case st == 408:
			s.attacks.hdrCut.Add(1)
		default:
			s.attacks.other(&s.attacks.hdrOther, "header-only", st, err)
		}
		pause(ctx, 200*time.Millisecond)
	}
}

// slowBody sends 10 of 1,000 declared bytes.
func (s *soak) slowBody(ctx context.Context) {
	for ctx.Err() == nil {
		st, took, err := s.rawAttack(ctx, 1000, 10)
		switch {
		case ctx.Err() != nil:
			if st == 0 {
				s.attacks.slowHeld.Add(1)
			}
		case st == 408:
			s.attacks.slowCut.Add(1)
			for {
				m := s.attacks.slowMaxWait.Load()
				if int64(took) <= m || s.attacks.slowMaxWait.CompareAndSwap(m, int64(took)) {
					break
				}
			}
		default:
			s.attacks.other(&s.attacks.slowOther, "slow body", st, err)
			pause(ctx, 50*time.Millisecond)
		}
	}
}

// shapeAttack sends 86-byte JSON requests declaring 256 images.
func (s *soak) shapeAttack(ctx context.Context, c *http.Client) {
	body := fmt.Appendf(nil, `{"inputs":[{"name":"input","datatype":"FP32","shape":[256,3,%d,%d],"data":[1,2,3]}]}`, s.o.imageSize, s.o.imageSize)
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, "POST", "http://"+s.addr+"/v2/models/"+s.model+"/infer", bytes.NewReader(body))
		if err != nil {
			return
		}
		resp, err := c.Do(req)
		if err != nil {
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 400 {
			s.attacks.shapeRefused.Add(1)
			s.attacks.shapeBytes.Store(int64(len(body)))
		} else if ctx.Err() == nil {
			s.attacks.shapeOther.Add(1)
		}
		pause(ctx, 10*time.Millisecond)
	}
}

// rssWatch samples the server's memory from /proc.
type rssWatch struct {
	pid    int
	hwm    atomic.Int64 // VmHWM: the peak resident set
	maxRSS atomic.Int64 // the largest VmRSS sampled
}

// read samples /proc/<pid>/status once and returns VmHWM.
func (w *rssWatch) read() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.pid))
	if err != nil {
		return w.hwm.Load()
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmHWM" && name != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if name == "VmHWM" {
			w.hwm.Store(kb << 10)
		} else if kb<<10 > w.maxRSS.Load() {
			w.maxRSS.Store(kb << 10)
		}
	}
	return w.hwm.Load()
}

func (w *rssWatch) poll(done <-chan struct{}, s *soak) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		w.read()
		if i%20 == 0 {
			s.logf("server RSS peak %s; normal answered %d, lost %d", rssMiB(w.hwm.Load()), s.normal.answered.Load(), s.normal.lost.Load())
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

func rssMiB(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// writeSoakCheckpoint saves the narrow ResNet the child serves, named as
// torch hub names checkpoints (the loader checks the hash suffix).
func writeSoakCheckpoint(dir string) (string, error) {
	a := model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64)
	sd, err := model.Init(context.Background(), a, 3)
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "tiny.safetensors")
	if err := checkpoint.Save(tmp, sd); err != nil {
		return "", err
	}
	b, err := os.ReadFile(tmp)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	p := filepath.Join(dir, "tiny-"+hex.EncodeToString(sum[:4])+".safetensors")
	return p, os.Rename(tmp, p)
}

// report writes the figures and says whether the soak passed.
func (s *soak) report(base, stamp string, attackTook time.Duration, hwm, maxRSS int64, drainTook string, exitTook time.Duration, exitErr error) (string, error) {
	o := s.o
	n, d, a := &s.normal, &s.drain, &s.attacks
	lat := slices.Clone(s.latencies)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	var fails []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	lost := n.lost.Load() + d.lost.Load()
	mism := n.mismatched.Load() + d.mismatched.Load()
	check(lost == 0, "%d requests lost (no HTTP answer)", lost)
	check(mism == 0, "%d answers mismatched (wrong id or logits)", mism)
	check(n.other.Load()+d.other.Load() == 0, "%d unexpected statuses", n.other.Load()+d.other.Load())
	check(hwm < o.maxRSS, "peak RSS %s is not under %s", rssMiB(hwm), rssMiB(o.maxRSS))
	check(d.lostAfterSIGTERM.Load() == 0, "%d transport errors at SIGTERM", d.lostAfterSIGTERM.Load())
	check(d.drainNoClose.Load() == 0, "%d draining 503s without Connection: close", d.drainNoClose.Load())
	check(exitErr == nil, "the server's exit: %v", exitErr)
	check(n.answered.Load() > 0, "no normal request was answered during the attack")
	check(a.shapeOther.Load() == 0, "%d huge-shape JSON requests were not refused with 400", a.shapeOther.Load())

	var b strings.Builder
	fmt.Fprintf(&b, "# goinfer soak, %s\n\n", stamp)
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Command: `goinfer soak %s`  \n", strings.Join(os.Args[2:], " "))
	fmt.Fprintf(&b, "Machine: %s, %d CPUs; server: cpu engine, narrow ResNet (width 8, 10 classes), %dx%d FP32 images (%d KiB per request), serve flags `%s`  \n",
		host, runtime.NumCPU(), o.imageSize, o.imageSize, 3*o.imageSize*o.imageSize*4>>10, o.serveFlags)
	fmt.Fprintf(&b, "Log: %s.log\n\n", filepath.Base(base))
	fmt.Fprintf(&b, "## Attack phase (%v)\n\n", attackTook.Round(time.Second))
	fmt.Fprintf(&b, "%d normal clients beside %d connections sending 255 MiB bodies and holding the last byte, %d sending only headers that claim 256 MiB, %d sending 10 of 1,000 declared bytes, and %d clients sending %d-byte JSON requests that declare [256,3,%d,%d].\n\n",
		o.clients, o.bigBodies, o.headerOnly, o.slowBodies, o.shapeClients, a.shapeBytes.Load(), o.imageSize, o.imageSize)
	fmt.Fprintf(&b, "| normal clients | |\n|---|---|\n")
	fmt.Fprintf(&b, "| requests | %d |\n| answered (id and logits checked) | %d |\n| 503 queue full | %d |\n| 503 memory budget | %d |\n| lost (no HTTP answer) | %d (%s) |\n| mismatched | %d |\n| other statuses | %d |\n| latency p50 / p99 | %v / %v |\n\n",
		n.sent.Load(), n.answered.Load(), n.queueFull.Load(), n.memoryFull.Load(), n.lost.Load(), n.errorKinds(), n.mismatched.Load(), n.other.Load(),
		pct(0.5).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond))
	fmt.Fprintf(&b, "| hostile clients | refused 503 | cut off 408 | other answer | still held at the end |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| 255 MiB bodies, last byte held | %d | %d | %d | %d |\n", a.bigRefused.Load(), a.bigCut.Load(), a.bigOther.Load(), a.bigHeld.Load())
	fmt.Fprintf(&b, "| headers claiming 256 MiB | %d | %d | %d | %d |\n", a.hdrRefused.Load(), a.hdrCut.Load(), a.hdrOther.Load(), a.hdrHeld.Load())
	fmt.Fprintf(&b, "| 10 of 1,000 bytes (longest wait %v) | - | %d | %d | %d |\n", time.Duration(a.slowMaxWait.Load()).Round(time.Millisecond), a.slowCut.Load(), a.slowOther.Load(), a.slowHeld.Load())
	fmt.Fprintf(&b, "| small JSON, huge shape | %d (400) | - | %d | - |\n\n", a.shapeRefused.Load(), a.shapeOther.Load())
	if p := a.firstOther.Load(); p != nil {
		fmt.Fprintf(&b, "First other answer to an attacker: %s\n\n", *p)
	}
	fmt.Fprintf(&b, "## Drain (%d keep-alive clients for %v, then SIGTERM)\n\n", o.drainClients, o.drainLoad)
	fmt.Fprintf(&b, "| | |\n|---|---|\n| requests | %d |\n| answered | %d |\n| 503 shutting down (with Connection: close) | %d (%d) |\n| 503 queue full | %d |\n| lost | %d |\n| clients with a transport error after SIGTERM | %d (%s) |\n| mismatched | %d |\n| drain (server's log) | %s |\n| SIGTERM to exit | %v |\n| exit | %v |\n\n",
		d.sent.Load(), d.answered.Load(), d.draining.Load(), d.draining.Load()-d.drainNoClose.Load(), d.queueFull.Load(), d.lost.Load(), d.lostAfterSIGTERM.Load(), d.errorKinds(), d.mismatched.Load(),
		drainTook, exitTook.Round(time.Millisecond), errString(exitErr))
	fmt.Fprintf(&b, "## Totals\n\n| | |\n|---|---|\n| requests | %d |\n| answered | %d |\n| 503s | %d |\n| lost | %d |\n| mismatched | %d |\n| server peak RSS (VmHWM) | %s |\n| drain | %s |\n| transport errors at SIGTERM | %d |\n\n",
		n.sent.Load()+d.sent.Load(), n.answered.Load()+d.answered.Load(),
		n.queueFull.Load()+n.memoryFull.Load()+d.queueFull.Load()+d.memoryFull.Load()+d.draining.Load(),
		lost, mism, rssMiB(hwm), drainTook, d.lostAfterSIGTERM.Load())
	_ = maxRSS
	if len(fails) == 0 {
		b.WriteString("Result: PASS\n")
	} else {
		b.WriteString("Result: FAIL\n\n")
		for _, f := range fails {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		for _, t := range []*tally{n, d} {
			if p := t.firstLost.Load(); p != nil {
				fmt.Fprintf(&b, "- first failed request: %s\n", *p)
			}
		}
	}
	rep := b.String()
	if err := os.WriteFile(base+".md", []byte(rep), 0o644); err != nil {
		return rep, err
	}
	s.logf("report: %s.md", base)
	if len(fails) > 0 {
		return rep, fmt.Errorf("soak failed: %s", strings.Join(fails, "; "))
	}
	return rep, nil
}

func errString(err error) string {
	if err == nil {
		return "clean (0)"
	}
	return err.Error()
}
