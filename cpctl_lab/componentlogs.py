"""Log lines in the formats the real control-plane binaries write, for ``crictl logs`` in the lab.

* kube-apiserver, kube-controller-manager, kube-scheduler log with klog to stderr:
  ``I1203 10:01:02.123456       1 server.go:148] "message" key="value"`` (severity letter, month
  and day, time with microseconds, the PID padded to 7 -- 1 inside a container --, file:line).
  A command line that pflag cannot parse is reported by component-base/cli/run.go *before* logging
  is set up: the usage text, then ``Error: <pflag error>``; an error after that is a klog line
  ``E... run.go:72] "command failed" err="..."``. Both exit with code 1.
* etcd logs with zap as JSON lines to stderr. A command line Go's ``flag`` package rejects prints
  the error and etcd's usage and exits with code 2 (etcdmain/config.go ``parse``); a later error
  is a ``"level":"fatal"`` line and exit code 1.

Every line is a (unix nanoseconds, stream, text) tuple; ``crictl logs`` writes each one back to the
stream it came from, as the real crictl does with the CRI log file.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

LogLine = tuple[int, str, str]
STDERR = "stderr"
STDOUT = "stdout"


def klog(severity: str, source: str, message: str, at_ns: Optional[int] = None, **kv: Any) -> LogLine:
    """One klog text-format line (structured: a quoted message plus key="value" pairs)."""
    ns = at_ns if at_ns is not None else time.time_ns()
    secs, frac = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(secs)) + f".{frac // 1000:06d}"
    parts = [json.dumps(message)] + [f"{k}={json.dumps(str(v))}" for k, v in kv.items()]
    return ns, STDERR, f"{severity[0].upper()}{stamp} {1:7d} {source}] " + " ".join(parts)


def klog_plain(severity: str, source: str, message: str, at_ns: Optional[int] = None) -> LogLine:
    """A klog line with an unstructured (printf-style) message."""
    ns = at_ns if at_ns is not None else time.time_ns()
    secs, frac = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(secs)) + f".{frac // 1000:06d}"
    return ns, STDERR, f"{severity[0].upper()}{stamp} {1:7d} {source}] {message}"


def zap(level: str, caller: str, message: str, fields: Optional[dict[str, Any]] = None) -> LogLine:
    """One etcd (zap production encoder) JSON line with ``fields`` after the message."""
    ns = time.time_ns()
    secs, frac = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac // 1000:06d}Z"
    record: dict[str, Any] = {"level": level, "ts": stamp, "caller": caller, "msg": message}
    record.update(fields or {})
    return ns, STDERR, json.dumps(record, separators=(",", ":"))


def plain(text: str, stream: str = STDERR, at_ns: Optional[int] = None) -> LogLine:
    """An undecorated line (usage text, cobra's ``Error:`` line, Go flag's messages)."""
    return (at_ns if at_ns is not None else time.time_ns()), stream, text


def startup_lines(role: str, version: str, argv: list[str], addresses: dict[str, str]) -> list[LogLine]:
    """The first lines a healthy component writes (what ``crictl logs`` shows after a good start)."""
    if role == "kube-apiserver":
        return [
            klog_plain("I", "options.go:228", f"external host was not specified, using {addresses['advertise']}"),
            klog("I", "server.go:148", "Version", version=version),
            klog("I", "server.go:150", "Golang settings", GOGC="", GOMAXPROCS="", GOTRACEBACK=""),
            klog("I", "secure_serving.go:213", "Serving securely on " + addresses["serving"]),
        ]
    if role in ("kube-controller-manager", "kube-scheduler"):
        start = "Starting" if role == "kube-controller-manager" else "Starting Kubernetes Scheduler"
        source = "controllermanager.go:189" if role == "kube-controller-manager" else "server.go:154"
        return [
            klog_plain("I", "serving.go:380", "Generated self-signed cert in-memory"),
            klog("I", source, start, version=version),
            klog("I", "secure_serving.go:213", "Serving securely on " + addresses["serving"]),
        ]
    if role == "etcd":
        return [
            zap("info", "etcdmain/etcd.go:73", "Running: ", {"args": argv}),
            zap("info", "embed/etcd.go:127", "configuring peer listeners", {"listen-peer-urls": [addresses["peer"]]}),
            zap("info", "embed/serve.go:250", "serving client traffic securely",
                {"traffic": "grpc+http", "address": addresses["serving"]}),
        ]
    return []


def command_failed(message: str, first: Optional[LogLine] = None) -> list[LogLine]:
    """component-base's report of an error after logging started: ``"command failed" err="..."``."""
    lines = [first] if first is not None else []
    return lines + [klog("E", "run.go:72", "command failed", err=message)]


def cobra_parse_error(binary: str, usage: list[str], message: str) -> list[LogLine]:
    """A flag parse error of a Kubernetes component: the usage text, then ``Error: ...``."""
    return [plain(text) for text in usage_text(binary, usage)] + [plain(f"Error: {message}")]


def usage_text(binary: str, flags: list[str]) -> list[str]:
    """An abbreviated cobra usage text listing the flags the component knows."""
    return ["Usage:", f"  {binary} [flags]", "", "Flags:"] + [f"      --{name}" for name in sorted(flags)] + [""]


ETCD_USAGE = [
    "Usage:",
    "",
    "  etcd [flags]",
    "    Start an etcd server.",
    "",
    "  etcd --version",
    "    Show the version of etcd.",
    "",
    "  etcd -h | --help",
    "    Show the help information about etcd.",
    "",
    "  etcd --config-file",
    "    Path to the server configuration file. Note that if a configuration file is provided, other "
    "command line flags and environment variables will be ignored.",
    "",
]


def etcd_parse_error(message: str) -> list[LogLine]:
    """Go ``flag``'s report of a bad etcd command line (written before etcd exits with code 2)."""
    return [plain(message)] + [plain(text) for text in ETCD_USAGE]


def etcd_fatal(message: str, error: str) -> list[LogLine]:
    """etcd's fatal zap line (exit code 1)."""
    trace = "go.etcd.io/etcd/server/v3/etcdmain.startEtcdOrProxyV2\n\tgo.etcd.io/etcd/server/v3/etcdmain/etcd.go:204"
    return [zap("fatal", "etcdmain/etcd.go:204", message, {"error": error, "stacktrace": trace})]
