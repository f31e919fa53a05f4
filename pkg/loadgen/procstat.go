package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// Linux fixes at 100 for user space on the architectures Go builds for.
const userHZ = 100

// maxProcFile bounds what is read of a /proc file.
const maxProcFile = 64 << 10

// readProc is a /proc file of pid ("self" for this process), at most maxProcFile bytes.
func readProc(pid, name string) ([]byte, error) {
	f, err := os.Open("/proc/" + pid + "/" + name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, maxProcFile)
	n, err := f.Read(b)
	if err != nil {
		return nil, fmt.Errorf("/proc/%s/%s: %w", pid, name, err)
	}
	return b[:n], nil
}

// CPUSeconds is utime+stime of a process ("self" for this one), from
// /proc/PID/stat.
func CPUSeconds(pid string) (float64, error) {
	b, err := readProc(pid, "stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields after the command name, want 13 or more", pid, len(f))
	}
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return float64(ut+st) / userHZ, nil
}

// Memory is VmRSS and VmHWM (the peak) of a process, in bytes, from
// /proc/PID/status.
func Memory(pid string) (rss, hwm float64, err error) {
	b, err := readProc(pid, "status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			rss = float64(n) * 1024
		case "VmHWM":
			hwm = float64(n) * 1024
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%s/status: no VmRSS", pid)
	}
	return rss, hwm, nil
}

// ParseMetrics reads the Prometheus text format into its samples by series
// ("name{labels}"); comments and lines that are no sample are skipped.
func ParseMetrics(b []byte) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// SumMetric adds the series of metric name whose labels contain every one
// of want (e.g. `type="EDS"`).
func SumMetric(m map[string]float64, name string, want ...string) float64 {
	var t float64
	for k, v := range m {
		series, labels, _ := strings.Cut(k, "{")
		if series != name {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(labels, w)
		}
		if ok {
			t += v
		}
	}
	return t
}
