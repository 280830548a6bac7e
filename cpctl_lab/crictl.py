"""crictl look-alike for the cpctl lab (a simulator): talks to the lab's control channel, not to a CRI socket.

This file is copied verbatim into ``<lab dir>/bin/lib/cpctl_lab_crictl.py``, which
``<lab dir>/bin/crictl`` imports (``python -IS``: no site), so it must stay standard-library only.
It prints what real crictl prints for the subcommands cpctl uses: ``pods``, ``ps``, ``inspect``,
``inspectp``, ``logs``, ``version``. ``--name``/``--namespace`` are unanchored regexes, like the real
ones. ``logs`` writes each line to the stream the container wrote it to (the control-plane components
log to stderr), as the real crictl does.
"""

import argparse
import json
import os
import re
import socket
import sys
import time
import urllib.parse


def _fetch(lab_json, node, path, **params):
    try:
        with open(lab_json) as fh:
            info = json.load(fh)
        url = info["control"]["url"]
    except (OSError, ValueError, KeyError, TypeError):
        raise SystemExit(
            'time="{}" level=fatal msg="validate service connection: validate CRI v1 '
            'runtime API for endpoint \\"unix:///run/containerd/containerd.sock\\": '
            'lab state not found ({})"'.format(time.strftime("%Y-%m-%dT%H:%M:%SZ"), lab_json)
        ) from None
    if node:
        params["node"] = node
    parts = urllib.parse.urlsplit(url)
    try:
        status, data = _get(parts.hostname, parts.port, path + "?" + urllib.parse.urlencode(params))
    except (OSError, ValueError) as exc:
        raise SystemExit(
            'time="{}" level=fatal msg="validate service connection: validate CRI v1 '
            'runtime API for endpoint \\"unix:///run/containerd/containerd.sock\\": '
            'connect: connection refused ({})"'.format(time.strftime("%Y-%m-%dT%H:%M:%SZ"), exc)
        ) from None
    if status >= 400:
        body = json.loads(data or b"{}")
        raise SystemExit(
            'time="{}" level=fatal msg="{}"'.format(time.strftime("%Y-%m-%dT%H:%M:%SZ"), body.get("error", status))
        )
    return json.loads(data)


def _get(host, port, target):
    """(status, body) of one HTTP/1.0 GET to the lab's control channel, on a plain socket: the shim
    runs at every look of cpctl's waits, and http.client's imports (email, ...) were half its start-up
    (a real crictl answers in tens of ms). The channel answers with a whole body and closes."""
    with socket.create_connection((host, port), timeout=5) as conn:
        conn.sendall(("GET %s HTTP/1.0\r\nHost: %s:%d\r\n\r\n" % (target, host, port)).encode("ascii"))
        chunks = []
        while True:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    fields = head.split(b"\r\n", 1)[0].split()
    if not sep or len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit():
        raise ValueError("not an HTTP answer")
    return int(fields[1]), body


def _ago(ns):
    secs = max(0, int(time.time() - int(ns) / 1e9))
    if secs < 60:
        return f"{secs} seconds ago" if secs != 1 else "1 second ago"
    if secs < 3600:
        return f"{secs // 60} minutes ago" if secs >= 120 else "About a minute ago"
    return f"{secs // 3600} hours ago" if secs >= 7200 else "About an hour ago"


def _table(headers, rows):
    widths = (
        [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    )
    lines = []
    for r in [headers] + rows:
        lines.append("   ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _labels_ok(labels, wanted):
    for item in wanted or []:
        k, _, v = item.partition("=")
        if labels.get(k) != v:
            return False
    return True


def cmd_pods(a, lab_json, node):
    items = _fetch(lab_json, node, "/cri/pods")["items"]
    out = []
    for s in items:
        if a.id and not s["id"].startswith(a.id):
            continue
        if a.name and not re.search(a.name, s["metadata"]["name"]):
            continue
        if a.namespace and not re.search(a.namespace, s["metadata"]["namespace"]):
            continue
        if a.state and s["state"] != {"ready": "SANDBOX_READY", "notready": "SANDBOX_NOTREADY"}.get(
            a.state.lower(), a.state.upper()
        ):
            continue
        if not _labels_ok(s["labels"], a.label):
            continue
        out.append(s)
    out.sort(key=lambda s: int(s["createdAt"]), reverse=True)
    if a.latest:
        out = out[:1]
    elif a.last:
        out = out[: a.last]
    if a.quiet:
        print("\n".join(s["id"] for s in out))
    elif a.output in ("json", "yaml"):
        print(json.dumps({"items": out}, indent=2))
    else:
        rows = [
            [
                s["id"] if a.no_trunc else s["id"][:13],
                _ago(s["createdAt"]),
                "Ready" if s["state"] == "SANDBOX_READY" else "NotReady",
                s["metadata"]["name"],
                s["metadata"]["namespace"],
                s["metadata"]["attempt"],
                "(default)",
            ]
            for s in out
        ]
        print(_table(["POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"], rows))
    return 0


def cmd_ps(a, lab_json, node):
    cs = _fetch(lab_json, node, "/cri/containers")["containers"]
    want_state = None
    if a.state:
        want_state = "CONTAINER_" + a.state.upper()
    out = []
    for c in cs:
        if want_state:
            if c["state"] != want_state:
                continue
        elif not a.all and c["state"] != "CONTAINER_RUNNING":
            continue
        if a.id and not c["id"].startswith(a.id):
            continue
        if a.pod and not c["podSandboxId"].startswith(a.pod):
            continue
        if a.name and not re.search(a.name, c["metadata"]["name"]):
            continue
        if a.namespace and not re.search(a.namespace, c["labels"].get("io.kubernetes.pod.namespace", "")):
            continue
        if a.image and a.image not in c["image"]["image"]:
            continue
        if not _labels_ok(c["labels"], a.label):
            continue
        out.append(c)
    out.sort(key=lambda c: int(c["createdAt"]), reverse=True)
    if a.latest:
        out = out[:1]
    elif a.last:
        out = out[: a.last]
    if a.quiet:
        print("\n".join(c["id"] for c in out))
    elif a.output in ("json", "yaml"):
        print(json.dumps({"containers": out}, indent=2))
    else:
        pods = {s["id"]: s for s in _fetch(lab_json, node, "/cri/pods")["items"]}    # the table's POD column
        rows = []
        for c in out:
            pod = pods.get(c["podSandboxId"], {})
            rows.append(
                [
                    c["id"] if a.no_trunc else c["id"][:13],
                    c["imageRef"][7:20] if not a.no_trunc else c["imageRef"],
                    _ago(c["createdAt"]),
                    c["state"].replace("CONTAINER_", "").capitalize(),
                    c["metadata"]["name"],
                    c["metadata"]["attempt"],
                    c["podSandboxId"] if a.no_trunc else c["podSandboxId"][:13],
                    (pod.get("metadata") or {}).get("name", "unknown"),
                ]
            )
        print(_table(["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID", "POD"], rows))
    return 0


def cmd_inspect(a, lab_json, node, kind):
    results = [_fetch(lab_json, node, "/cri/" + kind, id=i) for i in a.ids]
    if a.output == "table":
        for r in results:
            st = r["status"]
            print(
                "ID: {}\nName: {}\nState: {}\nCreated: {}".format(
                    st["id"], st["metadata"]["name"], st["state"], st["createdAt"]
                )
            )
        return 0
    for r in results:
        print(json.dumps(r, indent=2))
    return 0


def _stamp(ns):
    secs, frac = divmod(int(ns), 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def _print_lines(lines, timestamps):
    for ns, stream, text in lines:
        out = sys.stderr if stream == "stderr" else sys.stdout
        out.write((_stamp(ns) + " " if timestamps else "") + text + "\n")
        out.flush()


def cmd_logs(a, lab_json, node):
    params = {"id": a.id, "previous": "1" if a.previous else "0"}
    data = _fetch(lab_json, node, "/cri/logs", **params)
    lines = data["lines"]
    if a.tail >= 0:
        lines = lines[len(lines) - a.tail:] if a.tail else []
    _print_lines(lines, a.timestamps)
    seen = len(data["lines"])
    while a.follow and data.get("state") == "CONTAINER_RUNNING":
        time.sleep(0.5)
        data = _fetch(lab_json, node, "/cri/logs", **params)
        _print_lines(data["lines"][seen:], a.timestamps)
        seen = len(data["lines"])
    return 0


def main(argv, lab_json, node=None):
    node = node or os.environ.get("CPCTL_LAB_NODE") or os.environ.get("CPCTL_NODE_NAME") or None
    p = argparse.ArgumentParser(prog="crictl", description="crictl look-alike for the cpctl lab (simulated)")
    p.add_argument("-r", "--runtime-endpoint", default="")
    p.add_argument("-i", "--image-endpoint", default="")
    p.add_argument("-t", "--timeout", default="")
    p.add_argument("-D", "--debug", action="store_true")
    p.add_argument("-c", "--config", default="")
    sub = p.add_subparsers(dest="cmd")
    pp = sub.add_parser("pods")
    pp.add_argument("--name", default="")
    pp.add_argument("--namespace", default="")
    pp.add_argument("--id", default="")
    pp.add_argument("-s", "--state", default="")
    pp.add_argument("--label", action="append")
    pp.add_argument("-q", "--quiet", action="store_true")
    pp.add_argument("-o", "--output", default="table", choices=["json", "yaml", "table"])
    pp.add_argument("--no-trunc", action="store_true")
    pp.add_argument("-l", "--latest", action="store_true")
    pp.add_argument("-n", "--last", type=int, default=0)
    pp.add_argument("-v", "--verbose", action="store_true")
    ps = sub.add_parser("ps")
    ps.add_argument("-a", "--all", action="store_true")
    ps.add_argument("--name", default="")
    ps.add_argument("--namespace", default="")
    ps.add_argument("-p", "--pod", default="")
    ps.add_argument("--id", default="")
    ps.add_argument("--image", default="")
    ps.add_argument("-s", "--state", default="")
    ps.add_argument("--label", action="append")
    ps.add_argument("-q", "--quiet", action="store_true")
    ps.add_argument("-o", "--output", default="table", choices=["json", "yaml", "table"])
    ps.add_argument("--no-trunc", action="store_true")
    ps.add_argument("-l", "--latest", action="store_true")
    ps.add_argument("-n", "--last", type=int, default=0)
    ps.add_argument("-v", "--verbose", action="store_true")
    for name in ("inspect", "inspectp"):
        ip = sub.add_parser(name)
        ip.add_argument("ids", nargs="+")
        ip.add_argument("-o", "--output", default="json", choices=["json", "yaml", "go-template", "table"])
    lg = sub.add_parser("logs")
    lg.add_argument("id")
    lg.add_argument("--tail", type=int, default=-1)
    lg.add_argument("-p", "--previous", action="store_true")
    lg.add_argument("-t", "--timestamps", action="store_true")
    lg.add_argument("-f", "--follow", action="store_true")
    sub.add_parser("version")
    a = p.parse_args(argv)
    if a.cmd == "pods":
        return cmd_pods(a, lab_json, node)
    if a.cmd == "ps":
        return cmd_ps(a, lab_json, node)
    if a.cmd == "inspect":
        return cmd_inspect(a, lab_json, node, "inspect")
    if a.cmd == "inspectp":
        return cmd_inspect(a, lab_json, node, "inspectp")
    if a.cmd == "logs":
        return cmd_logs(a, lab_json, node)
    if a.cmd == "version":
        _fetch(lab_json, node, "/state")
        print(
            "Version:  0.1.0\nRuntimeName:  containerd\nRuntimeVersion:  v1.7.20-cpctl-lab\n"
            "RuntimeApiVersion:  v1"
        )
        return 0
    p.print_help()
    return 1
