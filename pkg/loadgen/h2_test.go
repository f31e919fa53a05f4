package loadgen

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rawBytes is a gRPC codec of plain bytes, for an echo server.
type rawBytes struct{}

func (rawBytes) Name() string { return "proto" }
func (rawBytes) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawBytes) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawBytes{}

// echoServer is a grpc-go server whose every method echoes each message
// back, slowly enough that the client's sends outrun its window, and ends
// the call with the status the first message names ("status:CODE").
func echoServer(t *testing.T) (addr string, tokens chan string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tokens = make(chan string, 16)
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawBytes{}),
		// the smallest windows grpc-go takes, so that the client must wait
		// for WINDOW_UPDATEs
		grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			md, _ := metadata.FromIncomingContext(ss.Context())
			tokens <- strings.Join(md.Get("authorization"), ",")
			for {
				var b []byte
				if err := ss.RecvMsg(&b); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if s, ok := strings.CutPrefix(string(b), "status:"); ok {
					return status.Error(codes.PermissionDenied, "asked for "+s)
				}
				time.Sleep(time.Millisecond)
				if err := ss.SendMsg(&b); err != nil {
					return err
				}
			}
		}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), tokens
}

// The transport against grpc-go's server: messages from a byte to several
// windows long arrive whole and in order both ways (the sends held back
// for window and sent as it returns), the token is sent, and a call's
// status ends the stream with that status.
func TestH2StreamEchoesThroughWindows(t *testing.T) {
	t.Parallel()
	addr, tokens := echoServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a window smaller than the messages, so the replies wait for ours too
	link := newH2Link(addr, &Spec{Token: "tok"}, h2DefaultWindow, true)
	defer link.close()

	sizes := []int{1, 5, 16384, 16385, 70000, 200000, 3, 131072}
	got := make(chan []byte, len(sizes))
	st, err := link.open(ctx, "/echo.Echo/Chat", func(_ *h2Stream, b []byte) error {
		got <- bytes.Clone(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for i, n := range sizes { // sent back to back: most of them wait for window
		m := bytes.Repeat([]byte{byte('a' + i)}, n)
		want = append(want, m)
		if err := st.send(&OutMsg{Head: m[:n/2], Tail: m[n/2:]}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i, w := range want {
		select {
		case b := <-got:
			if !bytes.Equal(b, w) {
				t.Fatalf("message %d: %d bytes back, want %d bytes of %q", i, len(b), len(w), w[0])
			}
		case <-ctx.Done():
			t.Fatalf("message %d of %d not echoed: %v", i, len(want), ctx.Err())
		}
	}
	if tok := <-tokens; tok != "Bearer tok" {
		t.Errorf("authorization %q, want Bearer tok", tok)
	}

	// a second stream on the same connection ends with the server's status
	st2, err := link.open(ctx, "/echo.Echo/Chat", func(*h2Stream, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.send(&OutMsg{Head: []byte("status:x y")}); err != nil {
		t.Fatal(err)
	}
	err = st2.wait(ctx)
	if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != "asked for x y" {
		t.Errorf("the stream ended with %v, want PermissionDenied: asked for x y", err)
	}
	if link.cur == nil || !link.cur.usable() {
		t.Error("one stream's status ended the connection")
	}

	// the first stream is still up; cancelling it ends it
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := st.wait(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait after cancel: %v", err)
	}
	if err := st.send(&OutMsg{Head: []byte("late")}); err == nil {
		t.Error("a send on a cancelled stream was taken")
	}
}

// A stream waits for the plane as a gRPC channel waiting for ready does:
// dialing again with back-off until the address listens.
func TestH2LinkWaitsForThePlane(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens yet
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	link := newH2Link(addr, &Spec{}, grpcWindow, false)
	defer link.close()
	opened := make(chan error, 1)
	go func() {
		_, err := link.open(ctx, "/echo.Echo/Chat", func(*h2Stream, []byte) error { return nil })
		opened <- err
	}()
	// the dial fails at least once before the server listens
	for link.failures() == 0 {
		select {
		case err := <-opened:
			t.Fatalf("opened before anything listened: %v", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error { return nil }))
	go func() { _ = srv.Serve(lis2) }()
	defer srv.Stop()
	if err := <-opened; err != nil {
		t.Fatalf("open once the plane listened: %v", err)
	}
}
