package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// A run's fleet is split into parts: one in the process itself, or one per
// worker process, each holding whole connections. The parent writes the
// flips before it makes them; each part credits its clients' receipts
// against its own flip log, and answers with a PartResult.

// PartResult is what one part of the fleet measured.
type PartResult struct {
	Clients     int           `json:"clients"`
	Envoy       int           `json:"envoy"`
	GRPC        int           `json:"grpc"`
	Delta       int           `json:"delta"`
	Connections int           `json:"connections"`
	Subscribed  int64         `json:"subscribed"` // cluster subscriptions over its clients
	Synced      int64         `json:"synced"`
	Expected    int64         `json:"expected"`
	Delivered   int64         `json:"delivered"`
	Conv        HistogramData `json:"convergence"`
	Resumed     HistogramData `json:"resumed"`
	Counters    Counters      `json:"counters"`
	// CPUSeconds and RSSBytes are the part's process's own.
	CPUSeconds float64 `json:"cpuSeconds"`
	RSSBytes   float64 `json:"rssBytes"`
	// DrainTimedOut: the part stopped waiting for deliveries at the drain limit.
	DrainTimedOut bool `json:"drainTimedOut,omitempty"`
}

// part is a share of the fleet the run drives.
type part interface {
	// synced returns once every client of the part holds its subscription.
	synced(ctx context.Context) error
	// flip logs a flip of cluster u about to be written at at.
	flip(u int32, at int64) error
	// mark waits up to drain for the flips' deliveries and reports, Conv
	// counting only the deliveries since the previous mark: a phase's end.
	mark(ctx context.Context, drain time.Duration) (PartResult, error)
	// finish waits up to drain for the flips' deliveries and reports, Conv
	// counting every delivery of the run; the part ends.
	finish(ctx context.Context, drain time.Duration) (PartResult, error)
}

// localPart is a fleet in this process.
type localPart struct {
	f   *Fleet
	log *FlipLog
}

func newLocalPart(f *Fleet) *localPart { return &localPart{f: f, log: f.Log()} }

func (p *localPart) synced(ctx context.Context) error {
	select {
	case <-p.f.Synced():
		return nil
	case <-p.f.Failed():
		return p.f.Err()
	case <-ctx.Done():
		return fmt.Errorf("%d of %d clients hold their subscription: %w", p.f.SyncedCount(), p.f.Clients(), ctx.Err())
	}
}

func (p *localPart) flip(u int32, at int64) error {
	p.log.Add(u, at)
	return p.f.Err()
}

func (p *localPart) finish(ctx context.Context, drain time.Duration) (PartResult, error) {
	return p.await(ctx, drain, false)
}

func (p *localPart) mark(ctx context.Context, drain time.Duration) (PartResult, error) {
	return p.await(ctx, drain, true)
}

// await waits up to drain for the logged flips' deliveries and reports:
// with segment, Conv counts the deliveries since the previous segment.
func (p *localPart) await(ctx context.Context, drain time.Duration, segment bool) (PartResult, error) {
	_, expected := p.log.Flips()
	timer := time.NewTimer(drain)
	defer timer.Stop()
	timedOut := false
wait:
	for p.f.Delivered() < expected {
		select {
		case <-p.f.Changed():
		case <-p.f.Failed():
			return PartResult{}, p.f.Err()
		case <-timer.C:
			timedOut = true
			break wait
		case <-ctx.Done():
			return PartResult{}, ctx.Err()
		}
	}
	r := PartResult{Clients: p.f.Clients(), Connections: p.f.Connections(), Synced: p.f.SyncedCount(),
		Expected: expected, Delivered: p.f.Delivered(), Resumed: p.f.Resumed.Data(), Counters: p.f.Counters(), DrainTimedOut: timedOut}
	if segment {
		r.Conv = p.log.Segment()
	} else {
		r.Conv = p.f.Conv.Data()
	}
	for _, s := range p.f.specs {
		r.Subscribed += int64(len(s.Subscribe))
		if s.Node.Kind == GRPC {
			r.GRPC++
		} else {
			r.Envoy++
		}
		if s.Delta {
			r.Delta++
		}
	}
	r.CPUSeconds, _ = CPUSeconds("self")
	r.RSSBytes, _, _ = Memory("self")
	return r, nil
}

// workerMsg is one line between the parent and a worker, as JSON: the
// parent sends Flips (with At), a Mark at each phase's end and then End;
// the worker sends Synced once, a Result for each Mark and for the End,
// or an Error.
type workerMsg struct {
	Flip    *int32      `json:"flip,omitempty"`
	At      int64       `json:"at,omitempty"`
	Mark    bool        `json:"mark,omitempty"`
	End     bool        `json:"end,omitempty"`
	DrainNs int64       `json:"drainNs,omitempty"`
	Synced  bool        `json:"synced,omitempty"`
	Result  *PartResult `json:"result,omitempty"`
	Error   string      `json:"error,omitempty"`
}

// maxWorkerLine bounds one line a worker or its parent reads.
const maxWorkerLine = 16 << 20

// RunWorker runs the fleet f as a worker process's part: it reads the
// parent's messages from in and answers on out, until the parent ends it
// (or in closes, or ctx ends).
func RunWorker(ctx context.Context, f *Fleet, in io.Reader, out io.Writer) error {
	p := newLocalPart(f)
	enc := json.NewEncoder(out)
	fail := func(err error) error {
		_ = enc.Encode(workerMsg{Error: err.Error()})
		return err
	}
	if err := f.Start(ctx); err != nil {
		return fail(err)
	}
	defer f.Close()
	if err := p.synced(ctx); err != nil {
		return fail(err)
	}
	if err := enc.Encode(workerMsg{Synced: true}); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, maxWorkerLine)
	for sc.Scan() {
		var m workerMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fail(fmt.Errorf("from the parent: %w", err))
		}
		switch {
		case m.Flip != nil:
			if err := p.flip(*m.Flip, m.At); err != nil {
				return fail(err)
			}
		case m.Mark:
			r, err := p.mark(ctx, time.Duration(m.DrainNs))
			if err != nil {
				return fail(err)
			}
			if err := enc.Encode(workerMsg{Result: &r}); err != nil {
				return err
			}
		case m.End:
			r, err := p.finish(ctx, time.Duration(m.DrainNs))
			if err != nil {
				return fail(err)
			}
			return enc.Encode(workerMsg{Result: &r})
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the parent closed the worker's input before the end")
}

// Worker is a started worker process, as the command that re-executes
// itself sees it: its standard input and output, and its end.
type Worker struct {
	In   io.WriteCloser
	Out  io.Reader
	Wait func() error
}

// remotePart is a worker process.
type remotePart struct {
	w   Worker
	enc *json.Encoder
	sc  *bufio.Scanner
	bw  *bufio.Writer
}

func newRemotePart(w Worker) *remotePart {
	w.Wait = sync.OnceValue(w.Wait) // waited for on an error and at the end
	bw := bufio.NewWriter(w.In)
	sc := bufio.NewScanner(w.Out)
	sc.Buffer(nil, maxWorkerLine)
	return &remotePart{w: w, enc: json.NewEncoder(bw), sc: sc, bw: bw}
}

// next is the worker's next message.
func (p *remotePart) next() (workerMsg, error) {
	var m workerMsg
	if !p.sc.Scan() {
		err := p.sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return m, fmt.Errorf("worker: %w (its exit: %v)", err, p.w.Wait())
	}
	if err := json.Unmarshal(p.sc.Bytes(), &m); err != nil {
		return m, fmt.Errorf("worker: %w", err)
	}
	if m.Error != "" {
		return m, errors.New("worker: " + m.Error)
	}
	return m, nil
}

func (p *remotePart) synced(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		m, err := p.next()
		if err == nil && !m.Synced {
			err = errors.New("worker: answered before its clients synced")
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *remotePart) flip(u int32, at int64) error {
	if err := p.enc.Encode(workerMsg{Flip: &u, At: at}); err != nil {
		return err
	}
	return p.bw.Flush()
}

func (p *remotePart) finish(ctx context.Context, drain time.Duration) (PartResult, error) {
	r, err := p.ask(ctx, workerMsg{End: true, DrainNs: int64(drain)})
	if err != nil {
		return r, err
	}
	p.w.In.Close()
	return r, p.w.Wait()
}

func (p *remotePart) mark(ctx context.Context, drain time.Duration) (PartResult, error) {
	return p.ask(ctx, workerMsg{Mark: true, DrainNs: int64(drain)})
}

// ask sends m and reads the worker's Result.
func (p *remotePart) ask(ctx context.Context, m workerMsg) (PartResult, error) {
	if err := p.enc.Encode(m); err != nil {
		return PartResult{}, err
	}
	if err := p.bw.Flush(); err != nil {
		return PartResult{}, err
	}
	type answer struct {
		m   workerMsg
		err error
	}
	done := make(chan answer, 1)
	go func() {
		m, err := p.next()
		done <- answer{m, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			p.w.In.Close()
			return PartResult{}, a.err
		}
		if a.m.Result == nil {
			p.w.In.Close()
			return PartResult{}, errors.New("worker: answered without a result")
		}
		return *a.m.Result, nil
	case <-ctx.Done():
		return PartResult{}, ctx.Err()
	}
}
