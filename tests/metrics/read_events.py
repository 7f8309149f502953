"""py:tensorboard_reader — TensorBoard's own reader accepts dlrun's hand-encoded event files.

Runs the dlrun_tb_write helper into a fresh directory, then reads the file back with
tensorboard's EventAccumulator and checks tags, steps, values and wall times; the TFRecord
CRCs are also verified independently here.
"""
import os
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def check_framing(path: str) -> int:
    data = open(path, "rb").read()
    off = n = 0
    while off < len(data):
        (length,) = struct.unpack_from("<Q", data, off)
        (len_crc,) = struct.unpack_from("<I", data, off + 8)
        assert len_crc == masked(crc32c(data[off:off + 8])), f"length CRC of record {n}"
        payload = data[off + 12:off + 12 + length]
        (data_crc,) = struct.unpack_from("<I", data, off + 12 + length)
        assert data_crc == masked(crc32c(payload)), f"data CRC of record {n}"
        off += 12 + length + 4
        n += 1
    return n


def main() -> None:
    helper = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="dlrun_tb_") as d:
        path = subprocess.run([helper, d], check=True, capture_output=True, text=True).stdout.strip()
        assert os.path.dirname(path) == d and "tfevents" in os.path.basename(path), path
        assert check_framing(path) == 1 + 8 + 1 + 1

        acc = EventAccumulator(d)
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert tags == {"train/loss", "train/lr", "eval/accuracy"}, tags

        loss = acc.Scalars("train/loss")
        assert [e.step for e in loss] == [0, 100, 200, 300, 5000000000], [e.step for e in loss]
        for e in loss[:4]:
            assert abs(e.value - 2.0 / (e.step + 1)) < 1e-6, (e.step, e.value)
            assert e.wall_time == 1700000000.0 + e.step
        assert loss[4].value == -1.5
        assert [e.value for e in acc.Scalars("train/lr")] == [struct.unpack("f", struct.pack("f", 0.1))[0]] * 4
        acc_ev = acc.Scalars("eval/accuracy")
        assert len(acc_ev) == 1 and acc_ev[0].step == 300 and acc_ev[0].value == 0.875
    print("ok: tensorboard reads dlrun event files")


if __name__ == "__main__":
    main()
