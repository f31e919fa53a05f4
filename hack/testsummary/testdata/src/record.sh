#!/usr/bin/env bash
# Records the go test -json streams of testdata/*.jsonl from this module:
#   cd hack/testsummary/testdata/src && bash record.sh
set -u
d=..
FIXTURE_RACE=1 go test -json -count=1 ./pass ./skipper ./nofiles ./mainout >$d/passing.jsonl
go test -json -count=1 -run '^TestRaceOnly$' ./skipper >$d/norace.jsonl
go test -json -count=1 ./failer ./broken >$d/failing.jsonl
go test -json -count=1 -timeout 3s ./hang >$d/timeout.jsonl
# a go test killed mid-run: its stream stops in the middle of a package
head -n 17 $d/failing.jsonl >$d/truncated.jsonl
exit 0
