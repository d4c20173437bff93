"""A reference OpenAI-compatible completions server for the backend's log-prob tests.

``python reference_server.py MODEL_DIR PORT`` serves the model in MODEL_DIR on 127.0.0.1:PORT with
the two prompt log-prob protocols of kept servers, computed from one unpadded forward pass per
prompt (a computation independent of the in-process backend's padded batches):

* model ``policy``: OpenAI completions' ``echo: true, logprobs: 0, max_tokens: 0``
  (``choices[].logprobs.token_logprobs``, the first ``null``), as vLLM answers it;
* model ``policy-vllm``: vLLM's ``prompt_logprobs: 0`` (``choices[].prompt_logprobs``, a list of
  ``{token_id: {"logprob", "rank", "decoded_token"}}``, the first ``null``); ``max_tokens: 0`` refused;
* model ``policy-broken``: like ``policy`` with one positive log-prob (a malformed answer).

A key other than ``right-key`` (or none, sent as ``EMPTY``) is refused with 401.
``POST /control {"fail_next": n}`` makes the next n completions answer 429 with ``Retry-After: 1``.
"""


import sys

MODELS = ("policy", "policy-vllm", "policy-broken")


def build(directory: str):
    """The app (imports here: pytest's doctest collection imports this file without fastapi)."""
    import torch
    import transformers
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    torch.set_num_threads(1)  # one request at a time on the event loop; leave the other cores to the client
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()
    app = FastAPI()
    state = {"fail_next": 0}

    @app.middleware("http")
    async def key(request: Request, call_next):
        # no key configured ("EMPTY") or the right one; any other key is refused
        if request.url.path.startswith("/v1") and request.headers.get("authorization") not in (
                "Bearer EMPTY", "Bearer right-key"):
            return JSONResponse({"error": {"message": "invalid API key"}}, status_code=401)
        return await call_next(request)

    @app.get("/health")
    def health():
        return {"ok": True}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "creditaudit-tests",
                                            "root": directory, "created": 0} for m in MODELS]}

    @app.post("/control")
    async def control(request: Request):
        state["fail_next"] = int((await request.json())["fail_next"])
        return {"ok": True}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        if state["fail_next"] > 0:
            state["fail_next"] -= 1
            return JSONResponse({"error": {"message": "busy"}}, status_code=429, headers={"Retry-After": "1"})
        name = body.get("model")
        if name not in MODELS:
            return JSONResponse({"error": {"message": f"model {name!r} not found"}}, status_code=404)
        prompts = body.get("prompt")
        if not (isinstance(prompts, list) and prompts and all(isinstance(p, list) for p in prompts)):
            return JSONResponse({"error": {"message": "this server takes token-id prompts"}}, status_code=400)
        vllm = name == "policy-vllm"
        if vllm and (body.get("max_tokens") == 0 or body.get("echo")):
            return JSONResponse({"error": {"message": "echo with max_tokens 0 unsupported"}}, status_code=400)
        if not vllm and "prompt_logprobs" in body:
            return JSONResponse({"error": {"message": "unknown field prompt_logprobs"}}, status_code=422)
        choices = []
        for index, ids in enumerate(prompts):
            with torch.inference_mode():
                logits = model(input_ids=torch.tensor([ids])).logits[0].float()
            logp = torch.log_softmax(logits, dim=-1)
            values = [None] + logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].double().tolist()
            if name == "policy-broken":
                values[-1] = 0.5
            choice = {"index": index, "text": "", "finish_reason": "length"}
            if vllm:
                choice["prompt_logprobs"] = [None] + [{str(ids[j]): {"logprob": values[j], "rank": 1, "decoded_token": "t"}}
                                                      for j in range(1, len(ids))]
                choice["logprobs"] = None
            else:
                choice["logprobs"] = {"tokens": [str(i) for i in ids], "token_logprobs": values,
                                      "top_logprobs": None, "text_offset": list(range(len(ids)))}
            choices.append(choice)
        return {"id": "cmpl-ref", "object": "text_completion", "created": 0, "model": name, "choices": choices,
                "usage": {"prompt_tokens": sum(len(p) for p in prompts), "completion_tokens": 0,
                          "total_tokens": sum(len(p) for p in prompts)}}

    return app


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(build(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
