#!/usr/bin/python3
"""check-pattern.py IMAGE OFFSET SIZE BS TAG [--except OFFSET:SIZE]...: every BS-sized block of
IMAGE[OFFSET, OFFSET+SIZE) holds what fio writes for --verify=pattern --verify_pattern=0xTAG%o: the bytes
of TAG then the block's offset (8 bytes, little-endian), repeated from the block's start; blocks that
overlap an --except range are not read. Exit 0 if all blocks match, 1 at the first that does not
(printed, with what it held). The e2e tests read the lender's backing file on L0 with it: the only proof
that the guest's writes reached the device.

check-pattern.py --fill IMAGE TAG: writes that pattern (BS 4096) over all of IMAGE: a canary that a
later check (OFFSET 0, SIZE the image's, BS 4096, --except what the guest wrote) finds intact."""
import os
import sys


def block(tag, off, bs):
    unit = tag + off.to_bytes(8, "little")
    return (unit * (bs // len(unit) + 1))[:bs]


def fill(image, tag):
    size = os.path.getsize(image)
    with open(image, "r+b") as f:
        for off in range(0, size - size % 4096, 4096):
            f.write(block(tag, off, 4096))
    print(f"filled {size // 4096} blocks of 4096 bytes of {image} with tag {tag.hex()}")
    return 0


def main():
    if sys.argv[1] == "--fill":
        return fill(sys.argv[2], bytes.fromhex(sys.argv[3]))
    image, offset, size, bs, tag = sys.argv[1], *(int(a, 0) for a in sys.argv[2:5]), bytes.fromhex(sys.argv[5])
    skip = []
    args = sys.argv[6:]
    while args:
        if args[0] != "--except" or len(args) < 2:
            sys.exit(f"unknown arguments: {args}")
        o, s = (int(a, 0) for a in args[1].split(":"))
        skip.append((o, o + s))
        args = args[2:]
    n = 0
    with open(image, "rb") as f:
        for off in range(offset, offset + size, bs):
            if any(off < e and off + bs > o for o, e in skip):
                continue
            want = block(tag, off, bs)
            f.seek(off)
            got = f.read(bs)
            n += 1
            if got != want:
                bad = next((i for i in range(len(got)) if got[i] != want[i]), len(got))
                print(f"mismatch: block at {off:#x}, byte {bad}: holds {got[bad:bad + 12].hex()}, "
                      f"expected {want[bad:bad + 12].hex()}")
                return 1
    print(f"ok: {n} blocks of {bs} bytes in [{offset:#x}, {offset + size:#x}) hold tag {tag.hex()} and their offsets"
          + (f" ({len(skip)} ranges not read)" if skip else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
