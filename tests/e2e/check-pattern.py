#!/usr/bin/python3
"""check-pattern.py IMAGE OFFSET SIZE BS TAG: every BS-sized block of IMAGE[OFFSET, OFFSET+SIZE) holds what
fio writes for --verify=pattern --verify_pattern=0xTAG%o: the bytes of TAG then the block's offset (8 bytes,
little-endian), repeated from the block's start. Exit 0 if all blocks match, 1 at the first that does not
(printed, with what it held). The e2e tests read the lender's backing file on L0 with it: the only proof
that the guest's writes reached the device."""
import sys


def main():
    image, offset, size, bs, tag = sys.argv[1], *(int(a, 0) for a in sys.argv[2:5]), bytes.fromhex(sys.argv[5])
    with open(image, "rb") as f:
        for off in range(offset, offset + size, bs):
            unit = tag + off.to_bytes(8, "little")
            want = (unit * (bs // len(unit) + 1))[:bs]
            f.seek(off)
            got = f.read(bs)
            if got != want:
                bad = next((i for i in range(len(got)) if got[i] != want[i]), len(got))
                print(f"mismatch: block at {off:#x}, byte {bad}: holds {got[bad:bad + 12].hex()}, "
                      f"expected {want[bad:bad + 12].hex()}")
                return 1
    print(f"ok: {size // bs} blocks of {bs} bytes at {offset:#x} hold tag {tag.hex()} and their offsets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
