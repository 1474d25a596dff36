"""Coverage-guided fuzzing of the event codec and the output decoder with atheris (optional).

    pip install atheris
    python tests/long/atheris_codec.py -atheris_runs=100000
    python tests/long/atheris_codec.py --seed-corpus corpus/ && \\
        python tests/long/atheris_codec.py corpus/ -max_total_time=3600

Without atheris installed it says so and exits 0. The first byte of each input picks the
target: `decode` (an event line; what decodes must re-encode to itself), `decode_many`
(the input split into lines), `upcast` (the input parsed as JSON, when it is an object), or
`decode_output` with unpickling off. Never fuzz `decode_output` with unpickling on: a
coverage-guided fuzzer can find a pickle that runs code. Every other exception is a finding:
libFuzzer stops and writes the input to a `crash-*` file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

try:
    import atheris
except ImportError:
    print("atheris is not installed (pip install atheris): skipping the coverage-guided fuzz.")
    sys.exit(0)

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

with atheris.instrument_imports(include=["flashfsm"]):
    from flashfsm.adapters.flash_wire import decode_output
    from flashfsm.errors import OutputDecodeError
    from flashfsm.events.codec import decode, decode_many, encode, upcast
    from flashfsm.events.errors import EventDecodeError


def one_input(data: bytes) -> None:
    """Feed one input to the target its first byte names."""
    if not data:
        return
    target, body = data[0] % 4, data[1:]
    if target == 0:
        try:
            event = decode(body)
        except EventDecodeError:
            return
        assert decode(encode(event)) == event
    elif target == 1:
        try:
            for _ in decode_many(body.split(b"\n")):
                pass
        except EventDecodeError:
            return
    elif target == 2:
        try:
            raw = json.loads(body)
        except (ValueError, RecursionError):
            return
        if isinstance(raw, dict):
            try:
                upcast(raw)
            except EventDecodeError:
                return
    else:
        try:
            result = decode_output(body, allow_pickle=False)
        except OutputDecodeError:
            return
        assert isinstance(result, dict)


def write_seed_corpus(directory: Path) -> int:
    """Valid event lines (one file per target byte) and job outputs to start the fuzzer from."""
    from flashfsm.events.models import HeartbeatObserved, StatusFetchFailed, StatusObserved

    directory.mkdir(parents=True, exist_ok=True)
    envelope = {"stream": "job-1", "id": "id-1", "at": 1_800_000_000.0}
    events = [
        StatusObserved(seq=0, status="COMPLETED", metrics={"loss": 0.1}, **envelope),
        StatusFetchFailed(seq=1, error_class="RunpodApiError", http_status=503, **envelope),
        HeartbeatObserved(seq=2, stage="train", step=10, ts=1.0, retriable=True, **envelope),
    ]
    lines = [encode(e) for e in events]
    seeds = [bytes([0]) + line for line in lines]
    seeds += [bytes([1]) + b"\n".join(lines), bytes([2]) + lines[0]]
    seeds += [bytes([3]) + json.dumps(o).encode() for o in ({"loss": 0.1}, {"error": "boom"})]
    for n, seed in enumerate(seeds):
        (directory / f"seed-{n}").write_bytes(seed)
    return len(seeds)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seed-corpus":
        print(f"wrote {write_seed_corpus(Path(sys.argv[2]))} seeds to {sys.argv[2]}")
        return
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
