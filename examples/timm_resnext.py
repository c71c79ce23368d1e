"""timm resnext101_32x8d with fuse_all (the guide's example, input 64x3x7x7).

The guide uses pretrained=True (needs a network); offline we use random weights.
"""
import timm
import torch

model = timm.create_model("resnext101_32x8d", pretrained=False, num_classes=2).eval()
opt_model = torch.compile(model, backend="fuse_all")
x = torch.randn(64, 3, 7, 7)
with torch.no_grad():
    out = opt_model(x)
    torch.testing.assert_close(out, model(x), rtol=1e-3, atol=1e-3)
print("resnext101_32x8d output", tuple(out.shape), "matches eager")
