package files

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// applyBurst syncs what one burst changed, and logs the outcome. It returns
// how long until a change held back by the settle rule is to be looked at
// again, or 0.
func (s *Source) applyBurst(ch *changes, log *slog.Logger) time.Duration {
	start := time.Now()
	s.mu.Lock()
	wasRefused := s.refused
	out, err := s.sync(ch, false)
	revision := s.Dir.Current().Revision
	s.mu.Unlock()
	s.setRefusal(err, out, revision)
	switch {
	case err != nil:
		if more, ok := s.refusalLog.take(start); ok {
			log.Error("manifest change refused; the last good topology keeps serving", "reason", truncateReason(err.Error()), "refusedMeanwhile", more)
		}
	case len(out.held) > 0:
		if more, ok := s.refusalLog.take(start); ok {
			log.Warn("manifest change held back: a file would take most of its objects away; the last topology keeps serving until the files have stayed so for the settle time",
				"files", truncateReason(heldText(out.held)), "settle", s.settleTime(), "recheckIn", out.wait.Round(time.Millisecond), "revision", revision, "refusedMeanwhile", more)
		}
	case out.snap != nil:
		log.Info("manifest change applied", "revision", out.snap.Revision, "files", out.files, "decoded", out.decoded,
			"objects", out.batch, "took", time.Since(start))
	case wasRefused:
		log.Info("manifest files are back to the applied topology", "revision", revision)
	}
	return out.wait
}

// maxRefusalText bounds the reason Refusal gives and a refusal's log line.
const maxRefusalText = 1024

// truncateReason bounds a reason to maxRefusalText bytes.
func truncateReason(text string) string {
	if len(text) > maxRefusalText {
		return strings.ToValidUTF8(text[:maxRefusalText], "") + "…"
	}
	return text
}

// Refused and held-back changes are logged in a bounded way: a burst of
// refusalBurst lines, then one line per refusalEvery at most, which counts
// the refusals it stands for. A writer that breaks the files again and
// again fills /readyz's one line, not the log.
const (
	refusalBurst = 10
	refusalEvery = 10 * time.Second
)

// refusalLog is the token bucket of refusal log lines.
type refusalLog struct {
	tokens     int
	refilled   time.Time
	suppressed int
}

// take says whether a refusal at now may be logged, and how many were not
// since the last line that was.
func (l *refusalLog) take(now time.Time) (suppressed int, ok bool) {
	if l.refilled.IsZero() {
		l.tokens, l.refilled = refusalBurst, now
	}
	if n := int(now.Sub(l.refilled) / refusalEvery); n > 0 {
		l.tokens = min(refusalBurst, l.tokens+n)
		l.refilled = l.refilled.Add(time.Duration(n) * refusalEvery)
	}
	if l.tokens == 0 {
		l.suppressed++
		return 0, false
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}

// setRefusal says, for /readyz and poise_source_refusing, whether the
// latest change is refused or held back.
func (s *Source) setRefusal(err error, out outcome, revision uint64) {
	var text string
	switch {
	case err != nil:
		text = fmt.Sprintf("the latest manifest change is refused; revision %d keeps serving: %s", revision, err.Error())
	case len(out.held) > 0:
		text = fmt.Sprintf("the latest manifest change is held back until the files have stayed so for %v (--settle); revision %d keeps serving: %s",
			s.settleTime(), revision, heldText(out.held))
	}
	refusing := 0.0
	if text == "" {
		s.refusal.Store(nil)
	} else {
		text = truncateReason(text)
		s.refusal.Store(&text)
		refusing = 1
	}
	if s.Metrics != nil {
		s.Metrics.Refusing.WithLabelValues(sourceName).Set(refusing)
	}
}

// Refusal says why the latest change to the files is refused (a file that
// cannot be read, an invalid document) or held back (the settle rule), or
// "" when the files on disk are what is served.
func (s *Source) Refusal() string {
	if p := s.refusal.Load(); p != nil {
		return *p
	}
	return ""
}
