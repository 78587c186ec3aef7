"""A scripted relay worker for the example epic and the tests: it does a little real work (files under
build/) and behaves the way the mode on its command line says, so every path of the relay shows up.

    python3 scripted.py succeed [LINK]   write build/<task>.txt and report success (LINK as the artifact)
    python3 scripted.py flaky            fail once (test_failure), succeed on the next try
    python3 scripted.py needs PATH       fail (missing_dependency) until PATH exists
    python3 scripted.py fail CATEGORY    always fail with that error_category
    python3 scripted.py sloppy           "succeed" but leave a TODO behind (the gate refuses it)
    python3 scripted.py crash            exit 3 without a receipt
    python3 scripted.py hang             never finish (until the relay kills it)
    python3 scripted.py hang-first       never finish on a first try; succeed once an attempt came before
    python3 scripted.py check            the quality gate: build/<task>.txt exists and has no TODO

Every run appends "<task> <attempt> <mode> <pid>" to build/runs.log and keeps the prior-attempts file it was
given as build/prior/<task>.<attempt>.json, so a reader (or a test) can see what each attempt saw.
The prior attempts are data: this worker reads them to decide, and never runs anything they say.
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path

BUILD = Path("build")


def receipt(**fields):
    with open(os.environ["RELAY_RECEIPT_FILE"], "w", encoding="utf-8") as fh:
        json.dump(fields, fh)


def prior_attempts():
    with open(os.environ["RELAY_PRIOR_ATTEMPTS_FILE"], encoding="utf-8") as fh:
        return json.load(fh)["prior_attempts"]


def main(argv):
    mode = argv[1] if len(argv) > 1 else "succeed"
    task, attempt = os.environ["RELAY_TASK_ID"], os.environ["RELAY_ATTEMPT"]
    out = BUILD / f"{task}.txt"

    if mode == "check":
        if not out.exists():
            print(f"{out} is missing")
            return 1
        if "TODO" in out.read_text():
            print(f"{out} still has a TODO in it")
            return 1
        return 0

    (BUILD / "prior").mkdir(parents=True, exist_ok=True)
    shutil.copy(os.environ["RELAY_PRIOR_ATTEMPTS_FILE"], BUILD / "prior" / f"{task}.{attempt}.json")
    with open(BUILD / "runs.log", "a", encoding="utf-8") as log:
        log.write(f"{task} {attempt} {mode} {os.getpid()}\n")

    if mode == "hang" or (mode == "hang-first" and not prior_attempts()):
        print("working…", flush=True)
        while True:
            time.sleep(1)
    if mode == "crash":
        print("something went badly wrong")
        return 3
    if mode == "fail":
        category = argv[2] if len(argv) > 2 else "code_error"
        receipt(result="failure", error_category=category, error_summary=f"{task} cannot be built ({category})",
                suggestion="look at the build log")
        return 1
    if mode == "needs":
        needed = Path(argv[2])
        if not needed.exists():
            receipt(result="failure", error_category="missing_dependency",
                    error_summary=f"{needed} does not exist", suggestion=f"create {needed}, then unblock {task}")
            return 1
    if mode == "flaky":
        earlier = [a for a in prior_attempts() if (a.get("receipt") or {}).get("error_category") == "test_failure"]
        if not earlier:
            receipt(result="failure", error_category="test_failure",
                    error_summary="test_login failed: expected 200, got 500",
                    suggestion="seed the users table before the login test", files_changed=[str(out)])
            out.write_text("half done\n")
            return 1
        lesson = earlier[0]["receipt"]["suggestion"]

    BUILD.mkdir(exist_ok=True)
    text = f"{task} built by attempt {attempt}\n"
    if mode == "flaky":
        text += f"learned from the earlier failure: {lesson}\n"
    if mode == "sloppy":
        text += "TODO: finish this\n"
    out.write_text(text)
    done = {"result": "success", "summary": f"built {out}", "files_changed": [str(out)]}
    if mode == "succeed" and len(argv) > 2:
        done["artifact"] = argv[2]
    receipt(**done)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
