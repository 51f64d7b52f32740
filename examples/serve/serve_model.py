"""A small torch model behind Ray Serve: replicas on the cluster's nodes, answering JSON over HTTP on
every node's Serve port, which the firewall keeps to the cluster's members.

    rayrig submit inventories/prod.py --working-dir examples/serve -- python serve_model.py

The job deploys the application and ends; the application keeps running (Ray Serve's controller
belongs to the cluster, not to the job) until ``python serve_model.py --shutdown``. From a member
host, or from this machine through ``ssh -L 8000:127.0.0.1:8000 HEAD``:

    curl -s -X POST http://HEAD:8000/predict -d '{"x": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]}'

It needs an image with Ray Serve: ``examples/images/serve`` (or ``examples/images/dev``).
"""

from __future__ import annotations

import argparse
import time
import urllib.request

import ray
import torch
from ray import serve
from starlette.requests import Request

FEATURES = 8


def model() -> torch.nn.Module:
    """The model: fixed weights, so every replica answers the same."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).eval()


@serve.deployment
class Predictor:
    def __init__(self) -> None:
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model().to(self.device)

    async def __call__(self, request: Request) -> dict:
        body = await request.json()
        x = torch.tensor(body["x"], dtype=torch.float32, device=self.device).reshape(-1, FEATURES)
        with torch.no_grad():
            y = self.model(x).squeeze(1).tolist()
        return {"y": y, "replica_node": ray.util.get_node_ip_address()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2, help="replicas of the model (default: 2)")
    parser.add_argument("--cpus", type=float, default=0.5, help="CPUs each replica declares (default: 0.5)")
    parser.add_argument("--port", type=int, default=8000, help="Serve's HTTP port on every node (default: 8000)")
    parser.add_argument("--shutdown", action="store_true", help="take the application down instead")
    args = parser.parse_args()

    ray.init()
    if args.shutdown:
        serve.shutdown()
        print("Ray Serve is shut down")
        return 0
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= args.replicas else 0
    serve.start(http_options={"host": "0.0.0.0", "port": args.port})  # every node; the firewall keeps it to members
    app = Predictor.options(num_replicas=args.replicas, ray_actor_options={"num_cpus": args.cpus, "num_gpus": gpus})
    started = time.monotonic()
    serve.run(app.bind(), name="predictor", route_prefix="/predict")
    request = urllib.request.Request(f"http://127.0.0.1:{args.port}/predict", data=b'{"x": [0, 0, 0, 0, 0, 0, 0, 0]}')
    with urllib.request.urlopen(request, timeout=30) as answer:
        print(f"answered: {answer.read().decode()}")
    print(f"serving {args.replicas} replicas{' on GPUs' if gpus else ''} at http://NODE:{args.port}/predict "
          f"(every node; ready in {time.monotonic() - started:.1f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
