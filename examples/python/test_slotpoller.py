"""The signature of slotpoller.py against docs/signed-calls.md's test
vector, and verify()'s refusals. Standard library only:

    python3 -m unittest -v test_slotpoller
"""

import unittest

import slotpoller

# docs/signed-calls.md, "Test vector".
KEY = b"0123456789abcdef-test-key"
TARGET = "/app/jobs/report?day=2024-05-01&x=%20y"
TIMESTAMP = "1714572000"
HEADERS = {
    "idempotency-key": "slotpoller-job-42",
    "x-slotpoller-attempt": "1",
    "x-slotpoller-deadline": "2024-05-01T12:00:30.000Z",
    "x-slotpoller-job": "42",
    "x-slotpoller-node": "web-01",
    "x-slotpoller-timeout-ms": "30000",
    "x-slotpoller-token": "7",
}
BODY = b'{"id":42}'
SIGNATURE = "v2=1fc092da394486e4ac2d15c51f1149b3c07ec6cc2e3484250590f5e816b51bc8"


def received(**changes):
    """The vector's request as the endpoint receives it: every value of
    every header by lower-case name."""
    headers = {name: [value] for name, value in HEADERS.items()}
    headers["x-slotpoller-timestamp"] = [TIMESTAMP]
    headers["x-slotpoller-signature"] = [SIGNATURE]
    for name, values in changes.items():
        name = name.replace("_", "-")
        if values is None:
            headers.pop(name, None)
        else:
            headers[name] = values
    return headers


class Signature(unittest.TestCase):
    def test_vector(self):
        self.assertEqual(slotpoller.sign(KEY, "POST", TARGET, TIMESTAMP, HEADERS, BODY), SIGNATURE)

    def test_surrounding_blanks_are_not_signed(self):
        padded = dict(HEADERS, **{"x-slotpoller-job": " \t42 "})
        self.assertEqual(slotpoller.sign(KEY, "POST", TARGET, TIMESTAMP, padded, BODY), SIGNATURE)

    def test_absent_and_empty_differ(self):
        empty = dict(HEADERS, **{"x-slotpoller-task": ""})
        self.assertNotEqual(slotpoller.sign(KEY, "POST", TARGET, TIMESTAMP, empty, BODY), SIGNATURE)

    def test_verify_accepts_the_vector_within_5_minutes(self):
        for now in (1714572000, 1714572000 + 300, 1714572000 - 300):
            self.assertEqual(slotpoller.verify([b"other-key-of-16+", KEY], "POST", TARGET, received(), BODY, now),
                             (SIGNATURE, 1714572000))
        upper = received(x_slotpoller_signature=[SIGNATURE.upper().replace("V2=", "v2=")])
        self.assertEqual(slotpoller.verify([KEY], "POST", TARGET, upper, BODY, 1714572000)[0], SIGNATURE)

    def test_verify_refuses(self):
        now = 1714572000
        cases = {
            "another key": ([b"not-the-key-of-the-farm"], TARGET, received(), BODY, now),
            "no key": ([], TARGET, received(), BODY, now),
            "stale": ([KEY], TARGET, received(), BODY, now + 301),
            "ahead": ([KEY], TARGET, received(), BODY, now - 301),
            "decoded target": ([KEY], "/app/jobs/report?day=2024-05-01&x= y", received(), BODY, now),
            "another body": ([KEY], TARGET, received(), b'{"id":43}', now),
            "no signature": ([KEY], TARGET, received(x_slotpoller_signature=None), BODY, now),
            "no timestamp": ([KEY], TARGET, received(x_slotpoller_timestamp=None), BODY, now),
            "leading zero": ([KEY], TARGET, received(x_slotpoller_timestamp=["0" + TIMESTAMP]), BODY, now),
            "v1": ([KEY], TARGET, received(x_slotpoller_signature=["v1=" + SIGNATURE[3:]]), BODY, now),
            "signature twice": ([KEY], TARGET, received(x_slotpoller_signature=[SIGNATURE, SIGNATURE]), BODY, now),
            "signed header twice": ([KEY], TARGET, received(x_slotpoller_job=["42", "42"]), BODY, now),
            "header dropped": ([KEY], TARGET, received(x_slotpoller_node=None), BODY, now),
        }
        for what, (keys, target, headers, body, at) in cases.items():
            with self.subTest(what):
                with self.assertRaises(slotpoller.Unauthorized):
                    slotpoller.verify(keys, "POST", target, headers, body, at)


class Deadline(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(slotpoller.parse_deadline("2024-05-01T12:00:30.000Z"), 1714564830.0)
        self.assertEqual(slotpoller.parse_deadline("2024-05-01T14:00:30.5+02:00"), 1714564830.5)
        self.assertEqual(slotpoller.parse_deadline("2024-05-01t12:00:30.123456789z"), 1714564830.123456789)
        for bad in ("", "2024-05-01", "2024-05-01T12:00:30", "tomorrow", "2024-13-01T12:00:30Z"):
            with self.subTest(bad):
                self.assertIsNone(slotpoller.parse_deadline(bad))


if __name__ == "__main__":
    unittest.main()
