"""What the container tests (test_image.py, test_k8s_emulate.py) share: podman as these machines
run it, a command run and checked, and the image built by scripts/image.sh under a tag of this
commit."""
import os
import resource
import subprocess
import time

from common import DLRUN, SRC, expect

# crun fails on these hosts' hybrid cgroups: runc, with explicit limits no higher than this
# process's own (runc may not raise them). docs/deploy.md, "The image".
PODMAN = ["podman", "--runtime", "runc"]
NOFILE = min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
NPROC = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[0])
LIMITS = ["--ulimit", f"nofile={NOFILE}:{NOFILE}", "--ulimit", f"nproc={NPROC}:{NPROC}"]


def sh(args, check=True, timeout=600, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        expect(p.returncode == 0, f"{' '.join(args)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def tag(prefix):
    """A tag of this commit for a test's image, e.g. e2e-4ea2dcf3ea1e."""
    head = subprocess.run(["git", "-C", SRC, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return f"{prefix}-{head.stdout.strip()}"


def build_image(image_tag, *options):
    """scripts/image.sh --tag image_tag (the base layer cached on the machine); returns its output."""
    t0 = time.monotonic()
    p = sh(["bash", os.path.join(SRC, "scripts", "image.sh"), "--tag", image_tag, *options],
           env=dict(os.environ, DLRUN=DLRUN), timeout=1800)
    print(f"  built in {time.monotonic() - t0:.0f} s:\n    " + "\n    ".join(p.stdout.strip().splitlines()))
    return p.stdout
