# The two commands of the README's quick start need no make; these are for
# releases.
.PHONY: dist test

dist:
	scripts/dist.sh dist

test:
	go test -race ./...
