package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/hashring"
	"poise.dev/poise/pkg/topology"
)

// maxKeyFileKeys is the most keys --keys reads: 10 million take seconds
// and a few hundred megabytes of output.
const maxKeyFileKeys = 10_000_000

type keyOptions struct {
	keys, headers, cookies, query []string
	sourceIP, keysFile            string
	ringCap                       uint64
}

func keyFlags(fs *pflag.FlagSet, o *keyOptions) {
	fs.StringArrayVar(&o.keys, "key", nil, "explain where a request whose first key source (spec.requestAffinity) carries VALUE goes in each client (repeatable: one request each)")
	fs.StringArrayVar(&o.headers, "header", nil, "a header of the one request explained: NAME=VALUE (repeatable)")
	fs.StringArrayVar(&o.cookies, "cookie", nil, "a cookie of the one request explained: NAME=VALUE (repeatable)")
	fs.StringArrayVar(&o.query, "query", nil, "a query parameter of the one request explained: NAME=VALUE (repeatable)")
	fs.StringVar(&o.sourceIP, "source-ip", "", "the source address of the one request explained")
	fs.StringVar(&o.keysFile, "keys", "", "a file of keys, one per line, each the value of the first key source: the owner of every key in each client, and each endpoint's share of the hash space")
	fs.Uint64Var(&o.ringCap, "grpc-ring-cap", 0, fmt.Sprintf("the gRPC clients' cap on the ring (GRPC_RING_HASH_CAP), 0 for their default %d, at most %d", hashring.DefaultRingSizeCap, hashring.MaxRingSize))
}

// any reports whether a key flag was given.
func (o keyOptions) any(fs *pflag.FlagSet) bool {
	for _, f := range []string{"key", "header", "cookie", "query", "source-ip", "keys", "grpc-ring-cap"} {
		if fs.Changed(f) {
			return true
		}
	}
	return false
}

// runExplainKeys answers explain's key flags for upstream k of snap.
func runExplainKeys(snap *topology.Snapshot, k topology.Key, o keyOptions, output string, stdout, stderr io.Writer) int {
	var first *topology.RequestKey
	if ra := snap.Upstream(k).Upstream.RequestAffinity; ra != nil && len(ra.Keys) > 0 {
		first = &ra.Keys[0]
	}
	rep, clients, err := explain.ExplainKeys(snap, k, explain.KeyQuery{
		Keys: o.keys, Headers: o.headers, Cookies: o.cookies, Query: o.query, SourceIP: o.sourceIP, RingCap: o.ringCap})
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		if ke := (*explain.KeyError)(nil); errors.As(err, &ke) {
			return exitUsage
		}
		return exitInvalid
	}
	if o.keysFile != "" {
		return explainKeyFile(rep, clients, first, o.keysFile, output, stdout, stderr)
	}
	return writeReport(output, stdout, stderr, rep, func() error { return explain.WriteKeyText(stdout, rep) })
}

// explainKeyFile answers --keys: each key's owner in each client, one line
// a key, then how many of the file's keys each endpoint owns beside its
// share of the hash space.
func explainKeyFile(rep explain.KeyReport, clients []*explain.KeyClient, first *topology.RequestKey, path, output string, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "error: --keys: %v\n", err)
		return exitInvalid
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), explain.MaxKeyLen+1)
	out := bufio.NewWriterSize(stdout, 1<<20)
	counts := make([]map[string]uint64, len(clients))
	for i := range counts {
		counts[i] = map[string]uint64{}
	}
	asJSON := output == "json"
	var requests *jsonRequests
	var picks []explain.KeyPick
	if asJSON {
		if requests, err = startJSONRequests(out, rep); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
	} else {
		fmt.Fprint(out, "# key")
		for _, c := range clients {
			fmt.Fprintf(out, "\t%s", c.Client)
		}
		fmt.Fprintln(out)
	}
	// the owners-only path counts by endpoint index, and folds in at the end
	owned := make([][]uint64, len(clients))
	reads := make([]bool, len(clients))
	for i, c := range clients {
		owned[i] = make([]uint64, len(c.Shares)+1)
		reads[i] = first != nil && c.ReadsFirst(*first)
	}
	n := 0
	for sc.Scan() {
		if n++; n > maxKeyFileKeys {
			fmt.Fprintf(stderr, "error: --keys %s: more than %d keys\n", path, maxKeyFileKeys)
			return exitInvalid
		}
		line := strings.TrimSuffix(sc.Text(), "\r")
		if asJSON {
			// every pick in full, retries and reasons included, written
			// as it is found: the answers are most of the output, and
			// holding them would cost memory in proportion to the file
			r, err := explain.FirstSourceRequest(first, line)
			if err != nil {
				fmt.Fprintf(stderr, "error: --keys %s:%d: %v\n", path, n, err)
				return exitInvalid
			}
			a := explain.KeyAnswer{Request: line, Picks: picks[:0]}
			for _, c := range clients {
				a.Picks = append(a.Picks, c.Pick(r))
			}
			picks = a.Picks
			if err := requests.write(a); err != nil {
				fmt.Fprintf(stderr, "error: %v\n", err)
				return exitInvalid
			}
			continue
		}
		// the owners only: the key hashed once, looked up in each table
		if err := explain.CheckFirstSource(first, line); err != nil {
			fmt.Fprintf(stderr, "error: --keys %s:%d: %v\n", path, n, err)
			return exitInvalid
		}
		_, h, _ := clients[0].FirstKeyHash(line)
		out.WriteString(line)
		for i, c := range clients {
			where, e := "random", -1
			if reads[i] {
				where, e = c.OwnerOf(h)
			}
			owned[i][e+1]++ // [0] counts the keys placed at random
			out.WriteByte('\t')
			out.WriteString(where)
		}
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(stderr, "error: --keys %s:%d: %v (a line is at most %d bytes)\n", path, n+1, err, explain.MaxKeyLen)
		return exitInvalid
	}
	if asJSON {
		if err := requests.end(); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
		return exitOK
	}
	for i, c := range clients {
		counts[i]["random"] += owned[i][0]
		for e, s := range c.Shares {
			counts[i][s.Endpoint] += owned[i][e+1]
		}
	}
	fmt.Fprintf(out, "# %d keys; keys of the file by endpoint, per client:\n", n)
	for i, c := range clients {
		fmt.Fprintf(out, "#   %s:", c.Client)
		for _, s := range c.Shares {
			fmt.Fprintf(out, " %s=%d", s.Endpoint, counts[i][s.Endpoint])
		}
		if r := counts[i]["random"]; r > 0 {
			fmt.Fprintf(out, " random=%d", r)
		}
		fmt.Fprintln(out)
	}
	if err := out.Flush(); err != nil {
		return exitInvalid
	}
	return writeReport(output, stdout, stderr, rep, func() error { return explain.WriteKeyText(stdout, rep) })
}

// jsonRequests writes a key report as writeReport's JSON would, its
// requests one at a time: the report's other fields first (requests is
// its last), each answer as it comes, then the closing brackets.
type jsonRequests struct {
	w *bufio.Writer
	n int
}

// startJSONRequests writes rep up to its requests' first answer; the
// answers rep already holds (the --key flags') are written first.
func startJSONRequests(w *bufio.Writer, rep explain.KeyReport) (*jsonRequests, error) {
	given := rep.Requests
	rep.Requests = []explain.KeyAnswer{}
	head, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	head, ok := bytes.CutSuffix(head, []byte("[]\n}"))
	if !ok {
		return nil, errors.New("explain --keys: the key report does not end with its requests")
	}
	w.Write(head)
	w.WriteByte('[')
	j := &jsonRequests{w: w}
	for _, a := range given {
		if err := j.write(a); err != nil {
			return nil, err
		}
	}
	return j, nil
}

func (j *jsonRequests) write(a explain.KeyAnswer) error {
	b, err := json.MarshalIndent(a, "    ", "  ")
	if err != nil {
		return err
	}
	if j.n > 0 {
		j.w.WriteByte(',')
	}
	j.n++
	j.w.WriteString("\n    ")
	_, err = j.w.Write(b)
	return err
}

func (j *jsonRequests) end() error {
	if j.n > 0 {
		j.w.WriteString("\n  ")
	}
	j.w.WriteString("]\n}\n")
	return j.w.Flush()
}
