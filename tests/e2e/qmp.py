#!/usr/bin/python3
"""qmp.py SOCKET COMMAND [ARGUMENTS-JSON] [--event NAME [--timeout S]]: one QMP command to a QEMU (run in
the L1 next to the L2's QEMU); prints its "return" as JSON, or the error and exits 1. With --event, also
waits (default 120 s) for that event and prints it (exit 1 if it does not come)."""
import json
import signal
import socket
import sys


def main():
    args = sys.argv[1:]
    event = timeout = None
    if "--event" in args:
        i = args.index("--event")
        event = args[i + 1]
        timeout = 120.0
        if "--timeout" in args:
            timeout = float(args[args.index("--timeout") + 1])
        args = args[:i]
    sock_path, command = args[0], args[1]
    arguments = json.loads(args[2]) if len(args) > 2 else {}
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    f = s.makefile("rw")
    json.loads(f.readline())  # greeting

    def send(cmd, a=None):
        f.write(json.dumps({"execute": cmd, **({"arguments": a} if a else {})}) + "\n")
        f.flush()
        while True:
            msg = json.loads(f.readline())
            if "event" in msg:
                events.append(msg)
            elif "error" in msg:
                print(json.dumps(msg["error"]))
                sys.exit(1)
            else:
                return msg["return"]

    events = []
    send("qmp_capabilities")
    print(json.dumps(send(command, arguments)))
    if event:
        signal.signal(signal.SIGALRM, lambda *_: sys.exit(f"no {event} within {timeout:.0f} s"))
        signal.alarm(int(timeout))
        while not any(e["event"] == event for e in events):
            events.append(json.loads(f.readline()))
        print(json.dumps(next(e for e in events if e["event"] == event)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
