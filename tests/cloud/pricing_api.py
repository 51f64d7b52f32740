"""The AWS Pricing API's GetProducts on a local port, answering from a recorded price list (moto has no Pricing API).

It speaks the API's own protocol (JSON 1.1: ``POST /`` with ``X-Amz-Target:
AWSPriceListService.GetProducts``), so rayrig's real boto3 ``pricing`` client
talks to it through ``RAYRIG_AWS_PRICING_ENDPOINT_URL`` as it would to AWS.
``recorded/pricing_get_products.json`` is a GetProducts answer in AWS's shape
(the API reference's example, each product as AWS lists it: attributes,
OnDemand and Reserved terms, kept as data where AWS sends JSON text) holding the published Linux on-demand prices of
the types the tests use; the server answers each request with the products
that match every one of its TERM_MATCH filters, as AWS does. A test may change
``products`` (reset before each test).
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).with_name("recorded") / "pricing_get_products.json"
TARGET = "AWSPriceListService.GetProducts"


def recorded_products() -> list[dict[str, Any]]:
    """The recorded answer's products, as data (the file keeps them readable; the server sends each as JSON text)."""
    return json.loads(RECORDED.read_text())["PriceList"]


def matches(product: dict[str, Any], service_code: str, filters: list[dict[str, str]]) -> bool:
    """Whether ``product`` is of ``service_code`` and matches every filter (field names case-insensitive)."""
    if product.get("serviceCode") != service_code:
        return False
    attributes = {k.lower(): v for k, v in product["product"]["attributes"].items()}
    attributes["servicecode"] = product["serviceCode"]
    return all(attributes.get(f["Field"].lower()) == f["Value"] for f in filters)


class PricingApi:
    """The server's state: the products it knows, and the requests it answered."""

    def __init__(self) -> None:
        self.products = recorded_products()
        self.requests: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.products = recorded_products()
        self.requests.clear()

    def answer(self, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for one request."""
        if target != TARGET:
            return 400, {"__type": "UnknownOperationException", "message": f"{target} is not served here"}
        filters = body.get("Filters", [])
        if "ServiceCode" not in body or any(f.get("Type") != "TERM_MATCH" for f in filters):
            return 400, {"__type": "InvalidParameterException", "message": "ServiceCode and TERM_MATCH filters only"}
        self.requests.append(copy.deepcopy(body))
        found = [p for p in self.products if matches(p, body["ServiceCode"], filters)]
        found = found[: body.get("MaxResults", 100)]
        return 200, {"FormatVersion": "aws_v1", "PriceList": [json.dumps(p) for p in found]}


def serve(api: PricingApi) -> Iterator[str]:
    """Serve ``api`` on a free local port for the duration; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            status, answer = api.answer(self.headers.get("X-Amz-Target", ""), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("x-amzn-RequestId", "rayrig-test-pricing")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            """Quiet: one line per request otherwise."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
