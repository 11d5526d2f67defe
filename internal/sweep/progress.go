package sweep

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress reports a sweep on stderr. On a terminal it keeps a one-line bar
// with an ETA at the bottom, redrawn every second, and prints each finished
// run above it; otherwise (a log file, CI) it prints only the finished-run
// lines, which are the same in both modes.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	term     bool
	width    int
	total    int // runs in the grid
	finished int // runs in the grid done, including those done before
	planned  int // runs this session
	ran      int // runs finished this session, failed ones included
	spent    time.Duration
	cur      string
	curStart time.Time
	now      func() time.Time
	stop     chan struct{}
	wg       sync.WaitGroup
}

func newProgress(w io.Writer, term bool, width, total, doneBefore, planned int) *progress {
	if width <= 0 {
		width = 80
	}
	p := &progress{
		w: w, term: term, width: width, total: total, finished: doneBefore,
		planned: planned, now: time.Now, stop: make(chan struct{}),
	}
	if term {
		p.wg.Add(1)
		go p.tick()
	}
	return p
}

func (p *progress) tick() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.drawBar()
			p.mu.Unlock()
		}
	}
}

// start marks run as the one in progress.
func (p *progress) start(r Run) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur, p.curStart = r.String(), p.now()
	p.drawBar()
}

// finish prints a finished run's line: its throughput, or why it failed.
func (p *progress) finish(r Run, throughput float64, d time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ran++
	p.finished++
	p.spent += d
	p.cur = ""
	var line string
	if err != nil {
		line = fmt.Sprintf("[%d/%d] %s: FAILED after %s: %s", p.finished, p.total, r, fmtSeconds(d), firstLine(err.Error()))
	} else {
		line = fmt.Sprintf("[%d/%d] %s: %.1f img/s (%s)", p.finished, p.total, r, throughput, fmtSeconds(d))
	}
	p.println(line)
}

// skip counts a run that was not tried (its configuration failed before).
func (p *progress) skip(r Run, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished++
	p.planned--
	p.println(fmt.Sprintf("[%d/%d] %s: skipped: %s", p.finished, p.total, r, why))
}

// note prints a line that is not about one run.
func (p *progress) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.println(fmt.Sprintf(format, args...))
}

// close stops the bar and clears it.
func (p *progress) close() {
	close(p.stop)
	p.wg.Wait()
	if p.term {
		p.mu.Lock()
		fmt.Fprint(p.w, "\r\033[K")
		p.mu.Unlock()
	}
}

func (p *progress) println(line string) {
	if p.term {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, line)
	p.drawBar()
}

// drawBar redraws the bar in place; on a non-terminal it does nothing.
func (p *progress) drawBar() {
	if !p.term {
		return
	}
	fmt.Fprint(p.w, "\r\033[K"+p.barLine())
}

// barLine is "[#####-----]  45%  27/60  ETA 3m12s  workers2 bs=32
// compile=false 0:12", cut to the terminal's width.
func (p *progress) barLine() string {
	frac := 0.0
	if p.total > 0 {
		frac = float64(p.finished) / float64(p.total)
	}
	const barW = 24
	filled := int(frac*barW + 0.5)
	s := fmt.Sprintf("[%s%s] %3.0f%% %d/%d ETA %s", strings.Repeat("#", filled), strings.Repeat("-", barW-filled),
		100*frac, p.finished, p.total, p.eta())
	if p.cur != "" {
		s += fmt.Sprintf("  %s %s", p.cur, fmtSeconds(p.now().Sub(p.curStart)))
	}
	if r := []rune(s); len(r) > p.width-1 {
		s = string(r[:p.width-1])
	}
	return s
}

// eta estimates the time left from the mean duration of this session's
// finished runs: that mean times the runs left, less how long the current
// one has been going.
func (p *progress) eta() string {
	if p.ran == 0 {
		return "?"
	}
	mean := p.spent / time.Duration(p.ran)
	left := mean * time.Duration(p.planned-p.ran)
	if p.cur != "" {
		left -= p.now().Sub(p.curStart)
	}
	return fmtETA(max(left, 0))
}

func fmtETA(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%dh%02dm", h, m)
	}
	if m > 0 {
		return fmt.Sprintf("%dm%02ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
