package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The clients' transport: gRPC over HTTP/2, written for a load generator.
// One goroutine per connection reads its frames and hands each complete
// response to its stream's client in place, which queues its ACK for the
// connection's writer there and then: one hand-off per delivery. grpc-go's
// own transport passes every message between three goroutines (the
// connection's reader, the stream's caller, the connection's writer); at
// 25,000 clients that cost the generator more CPU per delivery than the
// plane it measured spent, on the cores the two share. What the plane sees
// is the same: an HTTP/2 connection, gRPC framing, the headers grpc-go
// sends, grpc-go's BDP pings from gRPC-like clients, and flow control
// honoured both ways.

const (
	// h2DialTimeout bounds one connection attempt (grpc-go's
	// MinConnectTimeout as the fleet used it).
	h2DialTimeout = 20 * time.Second
	// h2MaxHeaderList bounds the header block the plane may send.
	h2MaxHeaderList = 64 << 10
	// h2DefaultWindow is HTTP/2's initial window, before SETTINGS and
	// WINDOW_UPDATE frames say otherwise.
	h2DefaultWindow = 65535
)

var errFleetClosed = errors.New("the fleet is closed")

// h2Link is one connection slot (a Spec.Conn): its streams share one
// connection, dialed again with back-off whenever it ended, as a gRPC
// channel waiting for ready does.
type h2Link struct {
	addr, authority string
	tls             *tls.Config // nil: plaintext
	token           string
	window          uint32 // the stream and connection windows this side announces
	// bdpPings: ping the plane whenever data arrives and no such ping is
	// out, as grpc-go's client does to size its windows (its BDP estimate)
	bdpPings bool

	mu    sync.Mutex // held while dialing, so streams of one link share a dial
	cur   *h2Conn
	fails atomic.Int32 // dials failed since the last that succeeded
}

func (l *h2Link) failures() int { return int(l.fails.Load()) }

func newH2Link(addr string, s *Spec, window uint32, bdpPings bool) *h2Link {
	l := &h2Link{addr: addr, authority: addr, token: s.Token, window: window, bdpPings: bdpPings}
	if s.TLS != nil {
		l.tls = s.TLS.Clone()
		l.tls.NextProtos = []string{"h2"}
		if l.tls.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			l.tls.ServerName = host
		}
	}
	return l
}

// open starts a stream of method on the link's connection, dialing first
// when there is none; it waits for a connection until ctx ends. onMsg is
// called with each message of the stream, on the connection's reader.
func (l *h2Link) open(ctx context.Context, method string, onMsg func(*h2Stream, []byte) error) (*h2Stream, error) {
	for {
		c, err := l.conn(ctx)
		if err != nil {
			return nil, err
		}
		s, err := c.open(method, onMsg, l.token)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// the connection ended or is going away: another one
	}
}

func (l *h2Link) conn(ctx context.Context) (*h2Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.cur != nil && l.cur.usable() {
			return l.cur, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := dialH2(ctx, l)
		if err == nil {
			l.cur = c
			l.fails.Store(0)
			return c, nil
		}
		// grpc-go's back-off as the fleet configured it: 50 ms, ×1.6,
		// ±20 %, at most 2 s
		d := 50 * time.Millisecond
		for range min(l.fails.Load(), 20) {
			d = min(d*8/5, 2*time.Second)
		}
		d += time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
		l.fails.Add(1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// close ends the link's connection.
func (l *h2Link) close() {
	l.mu.Lock()
	c := l.cur
	l.mu.Unlock()
	if c != nil {
		c.fail(errFleetClosed)
	}
}

// h2Conn is one HTTP/2 connection.
type h2Conn struct {
	nc     net.Conn
	fr     *http2.Framer // read by the reader goroutine only
	scheme string
	link   *h2Link

	// wake tells the writer that wbuf holds frames; closed ends it.
	wake, closed chan struct{}

	// mu guards the rest: a frame is encoded whole into wbuf under it, so
	// frames never interleave and the header encoder's table follows the
	// order the peer decodes in.
	mu        sync.Mutex
	wbuf      []byte // frames not yet handed to the writer (nil: none, no buffer held)
	henc      *hpack.Encoder
	hbuf      bytes.Buffer
	streams   map[uint32]*h2Stream
	nextID    uint32
	sendWin   int64 // the connection's send window
	peerWin   int64 // the peer's initial stream window
	maxFrame  int   // the largest DATA payload the peer takes
	recvOwed  int64 // connection bytes read and not yet returned by WINDOW_UPDATE
	err       error // why the connection ended; nil while it is up
	goingAway bool
	pingOut   bool // a BDP ping awaits its ACK
}

func dialH2(ctx context.Context, l *h2Link) (*h2Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, h2DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", l.addr)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if l.tls != nil {
		tc := tls.Client(nc, l.tls)
		if err := tc.HandshakeContext(dctx); err != nil {
			nc.Close()
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			nc.Close()
			return nil, fmt.Errorf("the plane negotiated %q, not h2", p)
		}
		nc, scheme = tc, "https"
	}
	c := &h2Conn{nc: nc, scheme: scheme, link: l, streams: map[uint32]*h2Stream{}, nextID: 1,
		wake: make(chan struct{}, 1), closed: make(chan struct{}),
		sendWin: h2DefaultWindow, peerWin: h2DefaultWindow, maxFrame: 16384}
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.fr = http2.NewFramer(io.Discard, bufio.NewReaderSize(nc, connBuffer))
	c.fr.SetReuseFrames()
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = h2MaxHeaderList

	c.mu.Lock()
	c.wbuf = append(c.out(), http2.ClientPreface...)
	c.wbuf = appendFrameHeader(c.out(), 12, http2.FrameSettings, 0, 0)
	c.wbuf = appendSetting(c.wbuf, http2.SettingEnablePush, 0)
	c.wbuf = appendSetting(c.wbuf, http2.SettingInitialWindowSize, l.window)
	if l.window > h2DefaultWindow {
		c.wbuf = appendWindowUpdate(c.out(), 0, l.window-h2DefaultWindow)
	}
	_ = c.flushLocked()
	c.mu.Unlock()
	go c.write()
	go c.read()
	return c, nil
}

func (c *h2Conn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && !c.goingAway && c.nextID < 1<<31-1
}

// open starts a stream: its HEADERS frame, as grpc-go sends it.
func (c *h2Conn) open(method string, onMsg func(*h2Stream, []byte) error, token string) (*h2Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	if c.goingAway {
		return nil, errors.New("the connection is going away")
	}
	s := &h2Stream{id: c.nextID, c: c, onMsg: onMsg, sendWin: c.peerWin, done: make(chan struct{})}
	c.nextID += 2
	c.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", c.scheme}, {":path", method}, {":authority", c.link.authority},
		{"content-type", "application/grpc"}, {"user-agent", "grpc-go/poise-load"}, {"te", "trailers"}} {
		_ = c.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if token != "" {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "authorization", Value: "Bearer " + token, Sensitive: true})
	}
	block := c.hbuf.Bytes()
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), c.maxFrame)
		t, flags := http2.FrameContinuation, http2.Flags(0)
		if first {
			t = http2.FrameHeaders
		}
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		c.wbuf = appendFrameHeader(c.out(), n, t, flags, s.id)
		c.wbuf = append(c.out(), block[:n]...)
		block = block[n:]
	}
	if err := c.flushLocked(); err != nil {
		return nil, err
	}
	c.streams[s.id] = s
	return s, nil
}

// read is the connection's reader: every frame the plane sends.
func (c *h2Conn) read() {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		if err := c.frame(f); err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *h2Conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		s := c.stream(f.StreamID)
		if err := c.received(s, int64(f.Length)); err != nil {
			return err
		}
		if s != nil { // else a stream that ended: its bytes still counted above
			if err := s.data(f.Data()); err != nil {
				s.reset(err, http2.ErrCodeCancel)
			} else if f.StreamEnded() {
				s.end(errors.New("the plane ended the stream without a status"))
			}
		}
		return nil
	case *http2.MetaHeadersFrame:
		s := c.stream(f.StreamID)
		if s == nil {
			return nil
		}
		if !f.StreamEnded() {
			if st := f.PseudoValue("status"); st != "200" {
				s.reset(fmt.Errorf("HTTP status %q", st), http2.ErrCodeCancel)
			}
			return nil
		}
		// trailers, or a trailers-only answer: the call's status
		v := headerValue(f, "grpc-status")
		code, err := strconv.ParseUint(v, 10, 32)
		switch {
		case v == "" && f.PseudoValue("status") != "" && f.PseudoValue("status") != "200":
			s.end(fmt.Errorf("HTTP status %q", f.PseudoValue("status")))
		case err != nil:
			s.end(fmt.Errorf("the stream ended without a gRPC status (%q)", v))
		case codes.Code(code) == codes.OK:
			s.end(errors.New("the plane ended the stream"))
		default:
			msg := headerValue(f, "grpc-message")
			if m, err := url.PathUnescape(msg); err == nil { // gRPC percent-encodes it
				msg = m
			}
			s.end(status.Error(codes.Code(code), msg))
		}
	case *http2.RSTStreamFrame:
		if s := c.stream(f.StreamID); s != nil {
			s.end(fmt.Errorf("the plane reset the stream: %v", f.ErrCode))
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		err := f.ForeachSetting(func(st http2.Setting) error {
			switch st.ID {
			case http2.SettingMaxFrameSize:
				c.maxFrame = int(st.Val)
			case http2.SettingInitialWindowSize:
				delta := int64(st.Val) - c.peerWin
				c.peerWin = int64(st.Val)
				for _, s := range c.streams {
					s.sendWin += delta
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		c.wbuf = appendFrameHeader(c.out(), 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
		return c.sendPendingLocked(nil)
	case *http2.WindowUpdateFrame:
		c.mu.Lock()
		defer c.mu.Unlock()
		if f.StreamID == 0 {
			c.sendWin += int64(f.Increment)
			return c.sendPendingLocked(nil)
		}
		if s := c.streams[f.StreamID]; s != nil {
			s.sendWin += int64(f.Increment)
			return c.sendPendingLocked(s)
		}
	case *http2.PingFrame:
		c.mu.Lock()
		defer c.mu.Unlock()
		if f.IsAck() {
			if f.Data == bdpPing {
				c.pingOut = false
			}
			return nil
		}
		c.wbuf = appendFrameHeader(c.out(), 8, http2.FramePing, http2.FlagPingAck, 0)
		c.wbuf = append(c.out(), f.Data[:]...)
		return c.flushLocked()
	case *http2.GoAwayFrame:
		c.mu.Lock()
		c.goingAway = true
		var gone []*h2Stream
		for id, s := range c.streams {
			if id > f.LastStreamID {
				gone = append(gone, s)
			}
		}
		c.mu.Unlock()
		for _, s := range gone {
			s.end(fmt.Errorf("the plane is going away (%v)", f.ErrCode))
		}
	}
	return nil
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func (c *h2Conn) stream(id uint32) *h2Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// received counts n bytes read on s (nil: a stream already ended): once
// half a window is owed, a WINDOW_UPDATE returns it, and with bdpPings a
// PING goes out as grpc-go's client sends it (after returning what the
// connection owes), as the data arrives and before it is read.
func (c *h2Conn) received(s *h2Stream, n int64) error {
	if n == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	half := int64(c.link.window / 2)
	c.recvOwed += n
	ping := c.link.bdpPings && !c.pingOut
	if c.recvOwed >= half || ping {
		c.wbuf = appendWindowUpdate(c.out(), 0, uint32(c.recvOwed))
		c.recvOwed = 0
	}
	if ping {
		c.pingOut = true
		c.wbuf = appendFrameHeader(c.out(), 8, http2.FramePing, 0, 0)
		c.wbuf = append(c.out(), bdpPing[:]...)
	}
	if s != nil && c.streams[s.id] == s {
		s.recvOwed += n
		if s.recvOwed >= half {
			c.wbuf = appendWindowUpdate(c.out(), s.id, uint32(s.recvOwed))
			s.recvOwed = 0
		}
	}
	return c.flushLocked()
}

// bdpPing is the payload of the pings bdpPings sends (grpc-go's).
var bdpPing = [8]byte{2, 4, 16, 16, 9, 14, 7, 7}

// sendPendingLocked writes what s (nil: every stream) holds back for want
// of window, as far as the windows now allow, and flushes.
func (c *h2Conn) sendPendingLocked(s *h2Stream) error {
	if s != nil {
		c.dataLocked(s)
	} else {
		for _, s := range c.streams {
			c.dataLocked(s)
		}
	}
	return c.flushLocked()
}

// dataLocked frames as much of s's pending bytes as the windows allow.
func (c *h2Conn) dataLocked(s *h2Stream) {
	for len(s.pending) > 0 && c.sendWin > 0 && s.sendWin > 0 {
		n := int(min(int64(len(s.pending)), int64(c.maxFrame), c.sendWin, s.sendWin))
		c.wbuf = appendFrameHeader(c.out(), n, http2.FrameData, 0, s.id)
		c.wbuf = append(c.out(), s.pending[:n]...)
		s.pending = s.pending[n:]
		c.sendWin -= int64(n)
		s.sendWin -= int64(n)
	}
	if len(s.pending) == 0 {
		s.pending = nil
	}
}

// out is wbuf, taken from the pool when it holds nothing.
func (c *h2Conn) out() []byte {
	if c.wbuf == nil {
		c.wbuf = (*wbufs.Get().(*[]byte))[:0]
	}
	return c.wbuf
}

// wbufs are write buffers: a connection holds one only while it has
// frames to write, so thousands of idle connections hold none.
var wbufs = sync.Pool{New: func() any { return new([]byte) }}

// flushLocked hands what wbuf holds to the writer. The reader never writes
// to the socket itself: blocked on a plane that is itself blocked writing
// to this side, it would stop reading, and neither would move again.
func (c *h2Conn) flushLocked() error {
	if c.err != nil {
		c.wbuf = nil
		return c.err
	}
	if len(c.wbuf) > 0 {
		select {
		case c.wake <- struct{}{}:
		default: // the writer is awake already and takes these too
		}
	}
	return nil
}

// write is the connection's writer: whatever frames are queued, in one
// system call.
func (c *h2Conn) write() {
	for {
		select {
		case <-c.closed:
			return
		case <-c.wake:
		}
		c.mu.Lock()
		b := c.wbuf
		c.wbuf = nil
		c.mu.Unlock()
		if len(b) == 0 {
			continue
		}
		_, err := c.nc.Write(b)
		if cap(b) <= 64<<10 {
			wbufs.Put(&b)
		}
		if err != nil {
			c.fail(fmt.Errorf("write: %w", err))
			return
		}
	}
}

// fail ends the connection and every stream on it with err.
func (c *h2Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	c.wbuf = nil
	close(c.closed)
	streams := c.streams
	c.streams = map[uint32]*h2Stream{}
	c.mu.Unlock()
	c.nc.Close()
	for _, s := range streams {
		s.end(err)
	}
}

// h2Stream is one gRPC call on a connection.
type h2Stream struct {
	id    uint32
	c     *h2Conn
	onMsg func(*h2Stream, []byte) error

	buf      []byte // the start of a message whose rest has not arrived; reader only
	sendWin  int64  // under c.mu
	recvOwed int64  // under c.mu
	pending  []byte // bytes held back for want of window, under c.mu

	once sync.Once
	err  error
	done chan struct{}
}

// send writes one message; what the windows do not allow yet goes out when
// the plane returns window.
func (s *h2Stream) send(m *OutMsg) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.streams[s.id] != s {
		return errors.New("the stream has ended")
	}
	n := len(m.Head) + len(m.Tail)
	s.pending = append(s.pending, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(s.pending[len(s.pending)-4:], uint32(n))
	s.pending = append(append(s.pending, m.Head...), m.Tail...)
	c.dataLocked(s)
	return c.flushLocked()
}

// data takes a DATA frame's payload: each message completed is handed to
// onMsg, in place when the frame holds it whole.
func (s *h2Stream) data(d []byte) error {
	if len(s.buf) > 0 {
		s.buf = append(s.buf, d...)
		rest, err := s.messages(s.buf)
		if err != nil {
			return err
		}
		s.buf = append(s.buf[:0], rest...)
		if len(s.buf) == 0 && cap(s.buf) > 1<<20 {
			s.buf = nil // the initial responses are large; the rest are not
		}
		return nil
	}
	rest, err := s.messages(d)
	if err != nil {
		return err
	}
	s.buf = append(s.buf, rest...)
	return nil
}

// messages hands each whole message of b to onMsg and returns the rest.
func (s *h2Stream) messages(b []byte) ([]byte, error) {
	for len(b) >= 5 {
		if b[0] != 0 {
			return nil, errors.New("a compressed message: the clients ask for none")
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if n > maxRecvMsg {
			return nil, status.Errorf(codes.ResourceExhausted, "a message of %d bytes; at most %d", n, maxRecvMsg)
		}
		if uint64(len(b)) < 5+uint64(n) {
			break
		}
		if err := s.onMsg(s, b[5:5+n]); err != nil {
			return nil, err
		}
		b = b[5+n:]
	}
	return b, nil
}

// end records why the stream ended (the first reason) and forgets it.
func (s *h2Stream) end(err error) {
	s.once.Do(func() {
		s.err = err
		c := s.c
		c.mu.Lock()
		if c.streams[s.id] == s {
			delete(c.streams, s.id)
		}
		s.pending = nil
		c.mu.Unlock()
		close(s.done)
	})
}

// reset ends the stream from this side: RST_STREAM with code, then end.
func (s *h2Stream) reset(err error, code http2.ErrCode) {
	c := s.c
	c.mu.Lock()
	if c.streams[s.id] == s && c.err == nil {
		c.wbuf = appendFrameHeader(c.out(), 4, http2.FrameRSTStream, 0, s.id)
		c.wbuf = binary.BigEndian.AppendUint32(c.out(), uint32(code))
		_ = c.flushLocked()
	}
	c.mu.Unlock()
	s.end(err)
}

// wait returns why the stream ended, or cancels it when ctx ends first.
func (s *h2Stream) wait(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		s.reset(ctx.Err(), http2.ErrCodeCancel)
		return ctx.Err()
	}
}

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(stream>>24)&0x7f, byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendSetting(b []byte, id http2.SettingID, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(id))
	return binary.BigEndian.AppendUint32(b, v)
}

func appendWindowUpdate(b []byte, stream uint32, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, inc&0x7fffffff)
}
