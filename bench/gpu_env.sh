# Source this on the GPU machine (no pip installs there): puts every stage's source on PYTHONPATH and
# registers the entry points (`fuse_all`, `fuse_all_cudagraphs`) through a dist-info folder, which is all
# importlib.metadata (and so torch.compiler.list_backends()) looks at.
#   source bench/gpu_env.sh && python examples/cos_sin.py
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SITE=${FUSE_ALL_GPU_SITE:-/tmp/fuse_all_site}
mkdir -p "$SITE/fuse_all-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: fuse-all\nVersion: 0.1.0\n' > "$SITE/fuse_all-0.1.0.dist-info/METADATA"
printf '[torch_dynamo_backends]\nfuse_all = fuse_all.backend:fuse_all\nfuse_all_cudagraphs = fuse_all_cudagraphs.backend:fuse_all_cudagraphs\n' \
  > "$SITE/fuse_all-0.1.0.dist-info/entry_points.txt"
PYTHONPATH="$SITE:$ROOT/src"
for pkg in "$ROOT"/packages/*/src; do PYTHONPATH="$PYTHONPATH:$pkg"; done
export PYTHONPATH PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
