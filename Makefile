# The two commands of the README's quick start need no make; these are for
# releases.
.PHONY: dist test

dist:
	scripts/dist.sh dist

# The README's test command: go test -json -race -timeout 20m ./..., its
# output as go test's, and one line for each package that skipped tests
# naming them and why (an integration test's unset variable).
test:
	go run ./scripts/runtests -timeout 20m
