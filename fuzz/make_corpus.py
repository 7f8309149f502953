#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/ (committed; run again
only to change them). Each seed is a valid input, so the fuzzers start from deep inside the
parsers: the shipped configs, real provider answers, small idx / CIFAR / JPEG / PNG files, and a
real checkpoint written by dlrun (the checkpoint seed needs a built dlrun: --dlrun PATH).

  python fuzz/make_corpus.py --dlrun build/dlrun     (the venv's Python: PIL comes with torchvision)
"""
import argparse
import glob
import gzip
import io
import json
import os
import shutil
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def config_seeds():
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.yaml"), recursive=True)):
        text = open(path, "rb").read()
        if b"\nbase:" in b"\n" + text:
            continue  # the target skips inheritance
        put("config", os.path.relpath(path, ROOT).replace("/", "_"), text)
    put("config", "overrides", b"model: {name: mlp, hidden: [16]}\ndata: {name: synthetic}\n#--\n"
        b"optim.lr=0.1\ndata.augment=[flip,crop]\nrun.dir=null\ntrain.epochs=2\n")
    put("config", "env", b"model: {name: convnet}\ndata: {name: fashion_mnist, root: ${env:DLRUN_FUZZ_ROOT}}\n"
        b"optim: {lr: ${env:DLRUN_FUZZ_LR}, momentum: ${env:MISSING,0.9}}\nrun: {name: \"$${literal}\"}\n")
    put("config", "anchors", b"common: &c {name: mlp}\nmodel: *c\ndata: {name: synthetic, synthetic_shape: [1, 8, 8]}\n")


def notice_seeds():
    put("notice", "aws", bytes([0]) + json.dumps({"action": "terminate", "time": "2026-11-23T10:00:00Z"}).encode())
    put("notice", "gcp", bytes([1]) + b"TRUE\n")
    put("notice", "azure", bytes([2]) + json.dumps({"DocumentIncarnation": 1, "Events": [
        {"EventId": "e1", "EventType": "Preempt", "ResourceType": "VirtualMachine", "NotBefore": "Mon, 23 Nov 2026"}]}).encode())
    put("notice", "aws404", bytes([3]) + b"")


def s3_seeds():
    """Answers as S3, STS and the metadata services send them (the first byte picks the parser;
    0x80 adds the prefix runs/exp1/)."""
    ns = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
    listing = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult {ns}><Name>b</Name><Prefix>runs/exp1/</Prefix>'
               '<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>'
               '<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>'
               '<Contents><Key>runs/exp1/step-00000012/model.pt</Key><LastModified>2026-11-25T10:00:00.000Z</LastModified>'
               '<ETag>&quot;a1b2&quot;</ETag><Size>30344</Size><StorageClass>STANDARD</StorageClass></Contents>'
               '<Contents><Key>runs/exp1/LATEST</Key><Size>14</Size></Contents>'
               '<CommonPrefixes><Prefix>runs/exp1/step%2000000013/</Prefix></CommonPrefixes></ListBucketResult>')
    put("s3", "list", bytes([0x80]) + listing.encode())
    put("s3", "list_cdata", bytes([0]) + b'<ListBucketResult><Contents><Key><![CDATA[a&b]]></Key><Size>0</Size>'
        b'</Contents><IsTruncated>false</IsTruncated><NextContinuationToken/></ListBucketResult>')
    put("s3", "uploads", bytes([0x81]) + (
        f'<ListMultipartUploadsResult {ns}><Bucket>b</Bucket><KeyMarker></KeyMarker><NextKeyMarker>runs/exp1/step-00000015/model.pt'
        '</NextKeyMarker><NextUploadIdMarker>x</NextUploadIdMarker><IsTruncated>false</IsTruncated><Upload>'
        '<Key>runs/exp1/step-00000015/model.pt</Key><UploadId>VXBsb2FkIElE</UploadId><Initiated>2026-11-25T10:00:00.000Z'
        '</Initiated></Upload></ListMultipartUploadsResult>').encode())
    put("s3", "upload_id", bytes([2]) + f'<InitiateMultipartUploadResult {ns}><Bucket>b</Bucket><Key>k</Key>'
        '<UploadId>VXBsb2FkIElE</UploadId></InitiateMultipartUploadResult>'.encode())
    put("s3", "error", bytes([3]) + b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code>'
        b'<Message>The provided token has expired.</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>')
    put("s3", "sts", bytes([4]) + (
        '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        '<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIAEXAMPLE</AccessKeyId><SecretAccessKey>s</SecretAccessKey>'
        '<SessionToken>t</SessionToken><Expiration>2026-11-25T11:00:00Z</Expiration></Credentials>'
        '<AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s</Arn></AssumedRoleUser></AssumeRoleWithWebIdentityResult>'
        '</AssumeRoleWithWebIdentityResponse>').encode())
    put("s3", "imds", bytes([5]) + json.dumps({"Code": "Success", "LastUpdated": "2026-11-25T10:00:00Z", "Type": "AWS-HMAC",
        "AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "s", "Token": "t", "Expiration": "2026-11-25T16:00:00Z"}).encode())
    put("s3", "urldecode", bytes([6]) + b"runs/exp%201/step-00000005+x%2B/model.pt")


def idx(n, h, w):
    images = struct.pack(">IIII", 0x803, n, h, w) + bytes((i * 7) % 256 for i in range(n * h * w))
    labels = struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))
    return images, labels


def idx_seeds():
    images, labels = idx(3, 4, 4)
    put("idx", "raw", images + b"IDXSPLIT" + labels)
    put("idx", "gz", gzip.compress(images, mtime=0) + b"IDXSPLIT" + gzip.compress(labels, mtime=0))


def cifar_seeds():
    put("cifar", "cifar10", bytes([0]) + b"".join(bytes([i]) + bytes((i + j) % 256 for j in range(3072)) for i in range(2)))
    put("cifar", "cifar100", bytes([1]) + b"".join(bytes([1, 50 + i]) + bytes(3072) for i in range(2)))


def image_seeds():
    from PIL import Image
    for mode, ch in (("RGB", 1), ("L", 0)):
        img = Image.new(mode, (7, 5), 90)
        for fmt, kw in (("JPEG", {"quality": 80}), ("PNG", {})):
            b = io.BytesIO()
            img.save(b, fmt, **kw)
            put("image", f"{fmt.lower()}-{mode}", bytes([ch]) + b.getvalue())
    b = io.BytesIO()
    Image.new("RGB", (9, 9), 30).save(b, "JPEG", progressive=True)
    put("image", "jpeg-progressive", bytes([1]) + b.getvalue())
    b = io.BytesIO()
    Image.new("RGBA", (4, 4), (1, 2, 3, 4)).save(b, "PNG")
    put("image", "png-rgba", bytes([1]) + b.getvalue())


def tar_seeds():
    import tarfile
    def shard(fmt, names):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
            for name, data in names:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        return out.getvalue()
    jpg = open(os.path.join(HERE, "corpus", "image", "jpeg-RGB"), "rb").read()[1:]
    put("tar", "ustar", shard(tarfile.USTAR_FORMAT, [("a.jpg", jpg), ("a.cls", b"3"), ("b.png", b"png"),
                                                    ("b.json", b'{"label": 1}')]))
    put("tar", "pax-long-name", shard(tarfile.PAX_FORMAT, [("d/" + "x" * 120 + ".jpg", jpg), ("d/" + "x" * 120 + ".cls", b"0")]))
    put("tar", "gnu-long-name", shard(tarfile.GNU_FORMAT, [("d/" + "y" * 120 + ".jpg", jpg), ("d/" + "y" * 120 + ".cls", b"0")]))
    put("tar", "index", json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "t", "shardlist": [
        {"url": "t-000000.tar", "nsamples": 2, "filesize": 4096, "sha256": "a" * 64,
         "dlrun": {"offsets": [512, 2048], "sizes": [10, 20], "labels": [1, 0]}}],
        "dlrun": {"version": 1, "num_classes": 2, "channels": 3}}).encode())


def weights_seeds():
    import torch
    from safetensors.torch import save
    tensors = {"conv.weight": torch.randn(2, 1, 3, 3), "bn.num_batches_tracked": torch.tensor(3),
               "fc.bias": torch.zeros(2, dtype=torch.bfloat16), "mask": torch.tensor([True, False])}
    put("weights", "safetensors", save(tensors, metadata={"format": "pt", "dlrun_dataset": '{"classes": ["a"]}'}))
    out = io.BytesIO()
    torch.save(tensors, out)
    put("weights", "torch-save", out.getvalue())


def checkpoint_seed(dlrun):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([dlrun, "train", os.path.join(HERE, "seed_run.yaml"), "--run-dir", tmp, "log.progress=none"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ck = os.path.join(tmp, "checkpoints", open(os.path.join(tmp, "checkpoints", "LATEST")).read().strip())
        parts = [open(os.path.join(ck, n), "rb").read() for n in ("manifest.json", "model.pt", "state.json")]
        put("checkpoint", "committed", b"CKPTSPLIT".join(parts))
        put("weights", "dlrun-model-pt", parts[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlrun", help="a built dlrun, for the checkpoint seed")
    args = ap.parse_args()
    shutil.rmtree(os.path.join(HERE, "corpus"), ignore_errors=True)
    config_seeds()
    notice_seeds()
    s3_seeds()
    idx_seeds()
    cifar_seeds()
    image_seeds()
    tar_seeds()
    weights_seeds()
    if args.dlrun:
        checkpoint_seed(args.dlrun)


if __name__ == "__main__":
    main()
