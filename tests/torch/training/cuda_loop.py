"""A training loop written for CUDA, as a user ports it: unchanged but for one import line.

    python cuda_loop.py OUT     (OUT: where torch.save puts the results)

``from torch_npu.contrib import transfer_to_npu`` makes every "cuda" below the NPU. A small
convolutional classifier, a DataLoader with two workers and pinned memory, SGD with momentum and a
learning-rate schedule, bfloat16 autocast through ``torch.cuda.amp``, and a checkpoint saved and
loaded with ``map_location="cuda"``. Saves ``{"losses", "initial", "weights", "device"}``.
"""

import os
import sys
import tempfile

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch_npu.contrib import transfer_to_npu  # noqa: F401 - the one line the port adds

assert torch.cuda.is_available()
torch.manual_seed(0)
images = torch.randn(64, 3, 8, 8)
classes = images.mean(dim=(2, 3)).argmax(1)  # learnable: the brightest channel
loader = DataLoader(TensorDataset(images, classes), batch_size=16, num_workers=2, pin_memory=True)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1),
    torch.nn.BatchNorm2d(8),
    torch.nn.ReLU(),
    torch.nn.MaxPool2d(2),
    torch.nn.Flatten(),
    torch.nn.Linear(8 * 4 * 4, 5),
).cuda()
initial = {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
losses = []
for _epoch in range(2):
    for x, y in loader:
        x, y = x.cuda(), y.to("cuda", non_blocking=True)
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            # The loss in float32, as transformers computes it: torch_npu's autocast (CUDA's old policy)
            # runs cross_entropy's log_softmax in bfloat16, the CPU's autocast in float32.
            loss = torch.nn.functional.cross_entropy(model(x).float(), y, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    schedule.step()
torch.cuda.synchronize()
with tempfile.TemporaryDirectory() as directory:
    path = os.path.join(directory, "checkpoint.pt")
    torch.save(model.state_dict(), path)
    model.load_state_dict(torch.load(path, map_location="cuda"))
weights = {name: t.detach().cpu() for name, t in model.state_dict().items()}
device = str(next(model.parameters()).device)
torch.save({"losses": losses, "initial": initial, "weights": weights, "device": device}, sys.argv[1])
