"""PyTorch on the same GPU as bench_gpu (bench/gpu/run.sh runs both): one JSON line per figure.

  torch_peer.py mlp003 float32|tf32|bf16 eager|compile
                                     the third tutorial's CIFAR-10 MLP at a batch of 1000, samples/s of
                                     training steps (SGD): float32 with TF32 off, TF32 on, or bf16
                                     autocast; and the step's peak bytes (max_memory_allocated less the
                                     data set, which this peer keeps on the GPU and Tandem on the host)
  torch_peer.py mlp25 DATA_DIR       the first tutorial's MLP on MNIST (Adam, batch 25): samples/s
  torch_peer.py cnn-mnist DATA_DIR   the tutorial's CNN on MNIST (Adam, batch 64) to 98.5% test
                                     accuracy: wall seconds from the start
Every line names the card and the driver.
"""
import json
import os
import sys
import time

START = time.perf_counter()

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_time_to_accuracy import load  # noqa: E402  (the IDX files, plain or gzipped)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEVICE = torch.device("cuda:0")


def card():
    driver = getattr(torch._C, "_cuda_getDriverVersion", lambda: None)()
    return {"gpu": torch.cuda.get_device_name(0), "driver": driver, "torch": torch.__version__}


def mlp003(precision, mode):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    batch, batches = 1000, 20
    x = torch.rand(batch * batches, 32, 32, 3, device=DEVICE)
    y = (torch.arange(batch * batches, device=DEVICE) % 10).long()
    model = nn.Sequential(nn.Flatten(), nn.Linear(3072, 3000), nn.ReLU(), nn.Linear(3000, 1000), nn.ReLU(),
                          nn.Linear(1000, 10), nn.Sigmoid()).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.NLLLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = model(xb)
        # Keras' sparse cross-entropy on the sigmoid's outputs, normalized per row, as Tandem's.
        p = out.float() / out.float().sum(1, keepdim=True)
        loss = loss_fn(torch.log(p.clamp_min(1e-7)), yb)
        loss.backward()
        opt.step()
        return loss

    if mode == "compile":
        step = torch.compile(step)
    data_bytes = x.nbytes + y.nbytes
    for i in range(batches):  # warm (and compile)
        step(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(batches):
            loss = step(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
            loss.item()  # as fit reads each step's loss
        torch.cuda.synchronize()
        best = max(best, batch * batches / (time.perf_counter() - t0))
    print(json.dumps({"who": f"pytorch-{mode}", "what": "mlp003", "precision": precision, "samples_per_s": round(best, 1),
                      "peak_bytes": torch.cuda.max_memory_allocated() - data_bytes, **card()}), flush=True)


def mlp25(data_dir):
    x, y = (t.to(DEVICE) for t in load(os.path.join(data_dir, "mnist"), "train"))
    x = x.reshape(len(x), -1)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10)).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()

    def epoch():
        order = torch.randperm(len(x), device=DEVICE)
        for i in range(0, len(x), 25):
            idx = order[i:i + 25]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            loss.item()  # as fit reads each step's loss
        torch.cuda.synchronize()

    epoch()  # warm
    best = 0.0
    for _ in range(2):
        t0 = time.perf_counter()
        epoch()
        best = max(best, len(x) / (time.perf_counter() - t0))
    print(json.dumps({"who": "pytorch-eager", "what": "mlp25", "samples_per_s": round(best, 1), **card()}), flush=True)


def cnn_mnist(data_dir):
    x, y = (t.to(DEVICE) for t in load(os.path.join(data_dir, "mnist"), "train"))
    tx, ty = (t.to(DEVICE) for t in load(os.path.join(data_dir, "mnist"), "t10k"))
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(5408, 64), nn.ReLU(),
                          nn.Linear(64, 10)).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    accuracy, epoch = 0.0, 0
    while epoch < 10 and accuracy < 0.985:
        order = torch.randperm(len(x), device=DEVICE)
        model.train()
        for i in range(0, len(x), 64):
            idx_b = order[i:i + 64]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx_b]), y[idx_b]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            accuracy = sum((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum().item()
                           for i in range(0, len(tx), 1000)) / len(tx)
        epoch += 1
    print(json.dumps({"who": "pytorch-eager", "what": "cnn-mnist", "epochs": epoch, "test_accuracy": round(accuracy, 4),
                      "wall_s": round(time.perf_counter() - START, 2), **card()}), flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "mlp003":
        mlp003(sys.argv[2] if len(sys.argv) > 2 else "float32", sys.argv[3] if len(sys.argv) > 3 else "eager")
    elif what == "mlp25":
        mlp25(sys.argv[2] if len(sys.argv) > 2 else "data")
    elif what == "cnn-mnist":
        cnn_mnist(sys.argv[2] if len(sys.argv) > 2 else "data")
    else:
        raise SystemExit(__doc__)
