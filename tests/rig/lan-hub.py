#!/usr/bin/python3
"""The rig's management LAN: an Ethernet hub made of one UDP socket on 127.0.0.1.

Each L1 QEMU has `-netdev socket,udp=127.0.0.1:HUB,localaddr=127.0.0.1:PORT`: it sends every Ethernet
frame as one datagram to HUB and receives frames on PORT. The hub repeats each frame to every other VM
port. Only loopback unicast: no multicast group, no tap device, no privileges, nothing leaves the machine.

usage: lan-hub.py --tag RIGDIR HUB_PORT VM_PORT...   (--tag only names the rig in the process list)
"""
import socket
import sys


def main(argv):
    if len(argv) < 4 or argv[0] != "--tag":
        sys.exit(__doc__)
    hub_port = int(argv[2])
    vm_ports = [int(p) for p in argv[3:]]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", hub_port))
    while True:
        frame, (_, src) = sock.recvfrom(65536)
        for port in vm_ports:
            if port == src:
                continue
            try:
                sock.sendto(frame, ("127.0.0.1", port))
            except OSError:
                pass  # that VM is down (rig_kill): drop, as a hub port with no cable would


if __name__ == "__main__":
    main(sys.argv[1:])
