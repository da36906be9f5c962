"""The PFS Studio REST API (docs/api.md) from Python: run a recipe and wait for its release, run an
adaptive analysis, export results. One HTTP session (httpx) for every request; see docs/client.md.

    from pfs_client import Client
    with Client("http://127.0.0.1:8000", username="analyst", password="analyst-demo-password") as pfs:
        release = pfs.run_recipe("demo.ages", "docs/examples/recipe.json")
    release.to_csv("ages.csv")
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from pfs_client.errors import AdaptiveRunFailed, ApiError, RoundFailed, WaitTimeout
from pfs_client.models import AdaptiveRun, Analysis, Budget, DryRun, Recipe, Release, Round
from pfs_client.progress import Progress, ProgressBar
from pfs_client.transport import Retry, Transport

DEFAULT_URL = "http://127.0.0.1:8000"

JsonInput = Mapping[str, Any] | str | os.PathLike[str]
OnProgress = Callable[[Any], None]


class Client:
    """One analyst's session with a PFS Studio server.

    ``url`` defaults to ``$PFS_URL`` (else http://127.0.0.1:8000). Authenticate with ``token``, or with
    ``username`` and ``password`` (the client then asks the server for a token), or ``$PFS_TOKEN``.
    ``timeout`` is per HTTP request; ``retries`` bounds the retries of one request.

    Every request goes through one HTTP session, whose connections are reused: ``close()`` it when
    done, or use the client as a context manager (``with Client(...) as pfs:``).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        username: str | None = None,
        password: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_retry_after: float = 300.0,
    ) -> None:
        self.transport = Transport(
            url or os.environ.get("PFS_URL") or DEFAULT_URL,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_retry_after=max_retry_after,
        )
        self.token: str | None = None
        if token:
            self.use_token(token)
        elif username is not None:
            try:
                self.login(username, password or "")
            except BaseException:
                self.close()  # the caller never gets the client to close
                raise
        elif os.environ.get("PFS_TOKEN"):
            self.use_token(os.environ["PFS_TOKEN"])

    def __repr__(self) -> str:
        return f"Client({self.url!r}, {'authenticated' if self.token else 'anonymous'})"

    @property
    def url(self) -> str:
        return self.transport.base_url

    def close(self) -> None:
        """Close the HTTP session and its connections. Requests after it raise TransportError."""
        self.transport.close()

    @property
    def closed(self) -> bool:
        return self.transport.closed

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ authentication

    def login(self, username: str, password: str) -> str:
        """Exchange a username and password for the user's API token, and use it from now on.
        Wrong ones raise AuthenticationError (HTTP 401)."""
        # A stale token would be refused before the credentials are even read.
        self.transport.headers.pop("Authorization", None)
        self.token = None
        token = self._post("/api/token/", {"username": username, "password": password}, retry=Retry.SAFE)["token"]
        self.use_token(token)
        return token

    def use_token(self, token: str) -> None:
        self.token = token
        self.transport.headers["Authorization"] = f"Token {token}"

    # ------------------------------------------------------------------ analyses, recipes, fleets

    def analyses(self) -> list[Analysis]:
        """The analyses you may see, with their policy and the budget spent (every page)."""
        return [Analysis.from_json(item) for item in self._list("/api/analyses/")]

    def analysis(self, identifier: str) -> Analysis:
        return Analysis.from_json(self._get(f"/api/analyses/{_segment(identifier)}/"))

    def fleets(self) -> list[dict[str, Any]]:
        """The fleets, as the API's JSON."""
        return self._list("/api/fleets/")

    def budget(self, identifier: str) -> Budget:
        """What the analysis has spent, per scope, with the guarantee as one (epsilon, delta) statement."""
        return Budget.from_json(self._get(f"/api/analyses/{_segment(identifier)}/budget/"))

    def create_recipe(self, analysis: str, recipe: JsonInput, *, idempotency_key: str | None = None) -> Recipe:
        """Validate and store a recipe (a dict, or the path of a JSON file) → the stored Recipe, with ``id``.
        A recipe's ``recipeIdentifier`` is unique in its analysis: another recipe under a stored one's
        identifier is refused (400). The same call again with the same ``idempotency_key`` (a new UUID
        unless given) answers the recipe it stored."""
        stored = self._post(
            f"/api/analyses/{_segment(analysis)}/recipes/",
            load_json(recipe),
            headers={"Idempotency-Key": idempotency_key or str(uuid.uuid4())},
            retry=Retry.SAFE,
        )
        return Recipe.from_json(stored)

    def recipes(self, analysis: str) -> list[Recipe]:
        """The analysis's stored recipes, newest first."""
        return [Recipe.from_json(item) for item in self._list(f"/api/analyses/{_segment(analysis)}/recipes/")]

    def recipe(self, recipe_id: int) -> Recipe:
        return Recipe.from_json(self._get(f"/api/recipes/{int(recipe_id)}/"))

    def dry_run(self, analysis: str, recipe: JsonInput) -> DryRun:
        """What every device would do with the recipe; nothing is stored, sent or spent. The recipe is
        validated as for storing it: one whose ``recipeIdentifier`` is already stored is refused (400)."""
        answer = self._post(f"/api/analyses/{_segment(analysis)}/dry-run/", load_json(recipe), retry=Retry.SAFE)
        return DryRun.from_json(answer)

    def propose(
        self, analysis: str, recipe: JsonInput, *, half_width: float | None = None, relative_error: float | None = None
    ) -> dict[str, Any]:
        """The cheapest parameters (least epsilon) within the analysis's policy that meet an accuracy target:
        ``half_width`` (± devices per bucket at 95%) or ``relative_error`` (on the largest bucket), one of
        them. ``met`` says whether any does; ``recipe`` is the recipe with them, ``message`` says it in words.
        Nothing is stored or spent."""
        if (half_width is None) == (relative_error is None):
            raise ValueError("give exactly one of half_width or relative_error")
        target = {"halfWidth": half_width} if half_width is not None else {"relativeError": relative_error}
        body = {"recipe": load_json(recipe), "target": target}
        return self._post(f"/api/analyses/{_segment(analysis)}/recipes/propose/", body, retry=Retry.SAFE)

    # ------------------------------------------------------------------ rounds

    def start_round(
        self, recipe_id: int, *, idempotency_key: str | None = None, confirm_small_cohorts: bool = False
    ) -> Round:
        """Start a round of a stored recipe. The Idempotency-Key (a new UUID unless given) goes with
        every retry, so a retried start returns the round the first attempt started. A recipe whose
        cohorts are expected below the minimum cohort, or whose expected noise exceeds what most
        buckets can hold (the dry run's ``too_noisy``), is refused (400, ``confirmSmallCohorts``)
        unless ``confirm_small_cohorts``: their devices would spend budget for nothing."""
        key = idempotency_key or str(uuid.uuid4())
        body = {"confirmSmallCohorts": True} if confirm_small_cohorts else None
        data = self._post(
            f"/api/recipes/{int(recipe_id)}/rounds/", body, headers={"Idempotency-Key": key}, retry=Retry.SAFE
        )
        return Round.from_json(data)

    def round(self, round_id: int) -> Round:
        return Round.from_json(self._get(f"/api/rounds/{int(round_id)}/"))

    def cancel(self, round_id: int) -> Round:
        """Stop a round that has not finished: nothing is released. Returns the round as it is now."""
        answer = self._post(f"/api/rounds/{int(round_id)}/cancel/", None, retry=Retry.UNSENT)
        if isinstance(answer, dict) and "status" in answer and "id" in answer:
            return Round.from_json(answer)
        return self.round(round_id)

    def wait(
        self,
        round_id: int,
        *,
        poll: float = 1.0,
        timeout: float | None = None,
        on_progress: OnProgress | None = None,
        progress: Progress = True,
    ) -> Round:
        """Poll until the round is released. A failed or cancelled round raises RoundFailed; past
        ``timeout`` seconds (default: no limit) WaitTimeout, and the round goes on. A progress bar
        (tqdm.auto: a terminal's or a notebook's) shows the shards done and devices answered, on
        stderr, or on the open text file ``progress`` names; ``progress=False`` draws none."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = ProgressBar(progress)
        try:
            while True:
                round_ = self.round(round_id)
                bar.update(round_)
                if on_progress is not None:
                    on_progress(round_)
                if round_.status == "released":
                    return round_
                if round_.finished:
                    raise RoundFailed(round_)
                if deadline is not None and time.monotonic() + poll > deadline:
                    raise WaitTimeout(f"round {round_id} still {round_.status} after {timeout} s")
                time.sleep(poll)
        finally:
            bar.close()

    def release(self, round_id: int, *, intervals: str | None = None, view: str | None = None) -> Release:
        """The release of a released round. ``intervals``: per-bucket (default) or simultaneous;
        ``view``: raw (default), clipped or thresholded."""
        params: dict[str, Any] = {"intervals": intervals, "view": view}
        data = self._get(f"/api/rounds/{int(round_id)}/release/", params=params)
        # A big release comes in pages of buckets (``next_offset``): the Release holds them all.
        while data.get("next_offset") is not None:
            page = self._get(
                f"/api/rounds/{int(round_id)}/release/", params={**params, "bucket_offset": data["next_offset"]}
            )
            for batch, more in zip(data["batches"], page["batches"], strict=True):
                if "buckets" in batch:
                    batch["buckets"] += more["buckets"]
            if "buckets" in data:
                data["buckets"] += page.get("buckets", [])
            data["next_offset"] = page.get("next_offset")
        return Release(round_id=int(round_id), data=data)

    def release_csv(self, round_id: int, *, intervals: str | None = None, view: str | None = None) -> str:
        """The release as the server's CSV (``/api/rounds/<id>/release.csv``, the dashboard's columns).
        A server without that endpoint gets the same rows built from the JSON release."""
        params = {"intervals": intervals, "view": view}
        try:
            response = self.transport.request(
                "GET", f"/api/rounds/{int(round_id)}/release.csv", params=params, headers={"Accept": "text/csv"}
            )
        except ApiError as error:
            # An older server has no such path (404, or 405/406 from a catch-all). A round without
            # a release is also a 404: the JSON request below raises it with the server's detail.
            if error.status not in (404, 405, 406):
                raise
        else:
            if response.headers.get("Content-Type", "").split(";")[0].strip() == "text/csv":
                return response.text
        return self.release(round_id, intervals=intervals, view=view).to_csv()

    def run_recipe(
        self,
        analysis: str | None,
        recipe: JsonInput | int,
        *,
        wait: bool = True,
        poll: float = 1.0,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        intervals: str | None = None,
        view: str | None = None,
        on_progress: OnProgress | None = None,
        progress: Progress = True,
        confirm_small_cohorts: bool = False,
    ) -> Release | Round:
        """Store the recipe, start its round and, with ``wait``, return its Release (else the Round).

        ``recipe`` is a dict, the path of a JSON file, or the id of a stored recipe (a new round of
        it; ``analysis`` is then not needed). The round's start carries ``idempotency_key`` (a new
        UUID unless given) on every retry, so a lost answer never starts a second round; with a
        stored recipe's id, calling again with the same key returns the same round. A refused
        recipe raises ApiError (400, by field); a failed or cancelled round RoundFailed. ``progress``:
        as for wait()."""
        key = idempotency_key or str(uuid.uuid4())
        if isinstance(recipe, int) and not isinstance(recipe, bool):
            recipe_id = recipe
        else:
            if analysis is None:
                raise ValueError("run_recipe needs the analysis to store a new recipe in")
            recipe_id = self._stored_recipe_id(analysis, load_json(recipe), key)
        round_ = self.start_round(recipe_id, idempotency_key=key, confirm_small_cohorts=confirm_small_cohorts)
        if not wait:
            return round_
        self.wait(round_.id, poll=poll, timeout=timeout, on_progress=on_progress, progress=progress)
        return self.release(round_.id, intervals=intervals, view=view)

    def _stored_recipe_id(self, analysis: str, recipe: dict[str, Any], key: str) -> int:
        """Store the recipe; if the very same recipe is already stored (a notebook cell run again), its id."""
        try:
            return self.create_recipe(analysis, recipe, idempotency_key=f"{key}/recipe").id
        except ApiError as refused:
            if refused.status != 400 or "recipeIdentifier" not in refused.fields:
                raise
            same = [r for r in self.recipes(analysis) if r.content == recipe]
            if not same:
                raise  # another recipe already has this identifier: the analyst must rename one
            return same[0].id

    # ------------------------------------------------------------------ adaptive runs

    def start_adaptive(
        self, spec: JsonInput, *, analysis: str | None = None, idempotency_key: str | None = None
    ) -> AdaptiveRun:
        """Start an adaptive run (docs/adaptive.md) from a spec, a dict or the path of a JSON file;
        ``analysis`` replaces the spec's. The whole budget plan is checked first (400 by field)."""
        body = dict(load_json(spec))
        if analysis is not None:
            body["analysis"] = analysis
        key = idempotency_key or str(uuid.uuid4())
        # Starting a run starts its first round: the same key goes with every retry.
        data = self._post("/api/adaptive-runs/", body, headers={"Idempotency-Key": key}, retry=Retry.SAFE)
        return AdaptiveRun.from_json(data)

    def adaptive_run(self, run_id: int) -> AdaptiveRun:
        return AdaptiveRun.from_json(self._get(f"/api/adaptive-runs/{int(run_id)}/"))

    def adaptive_runs(self, *, analysis: str | None = None, status: str | None = None) -> list[AdaptiveRun]:
        runs = self._list("/api/adaptive-runs/", params={"analysis": analysis, "status": status})
        return [AdaptiveRun.from_json(run) for run in runs]

    def pause(self, run_id: int) -> AdaptiveRun:
        """The current round finishes; the next then waits, editable, until resume()."""
        return AdaptiveRun.from_json(self._post(f"/api/adaptive-runs/{int(run_id)}/pause/", None, retry=Retry.UNSENT))

    def resume(self, run_id: int) -> AdaptiveRun:
        return AdaptiveRun.from_json(self._post(f"/api/adaptive-runs/{int(run_id)}/resume/", None, retry=Retry.UNSENT))

    def wait_adaptive(
        self,
        run_id: int,
        *,
        poll: float = 2.0,
        timeout: float | None = None,
        on_progress: OnProgress | None = None,
        comparison: bool = False,
        progress: Progress = True,
    ) -> AdaptiveRun:
        """Poll until the run is finished, or paused (it then waits for a person). A failed run
        raises AdaptiveRunFailed. With ``comparison``, a finished run is also waited on until its
        comparison with the static baseline is stored (it is computed just after). The progress bar
        counts the rounds finished of the plan's; ``progress`` as for wait()."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = ProgressBar(progress)
        try:
            while True:
                run = self.adaptive_run(run_id)
                bar.update(run)
                if on_progress is not None:
                    on_progress(run)
                if run.status == "failed":
                    raise AdaptiveRunFailed(run)
                if run.status == "paused" or (
                    run.status == "finished" and not (comparison and "comparison" not in run.data)
                ):
                    return run
                if deadline is not None and time.monotonic() + poll > deadline:
                    raise WaitTimeout(f"adaptive run {run_id} still {run.status} after {timeout} s")
                time.sleep(poll)
        finally:
            bar.close()

    def run_adaptive(
        self,
        analysis: str | None,
        spec: JsonInput,
        *,
        wait: bool = True,
        poll: float = 2.0,
        timeout: float | None = None,
        on_progress: OnProgress | None = None,
        progress: Progress = True,
    ) -> AdaptiveRun:
        """Start an adaptive run and, with ``wait``, return it finished (with its baseline comparison,
        if the spec has a baseline) or paused. ``analysis`` None keeps the spec's own."""
        body = dict(load_json(spec))
        run = self.start_adaptive(body, analysis=analysis)
        if not wait:
            return run
        return self.wait_adaptive(
            run.id,
            poll=poll,
            timeout=timeout,
            on_progress=on_progress,
            comparison="baseline" in body,
            progress=progress,
        )

    # ------------------------------------------------------------------ plumbing

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return _json(self.transport.request("GET", path, params=params))

    def _post(self, path: str, body: Any, *, retry: Retry, headers: dict[str, str] | None = None) -> Any:
        return _json(self.transport.request("POST", path, body=body, headers=headers, retry=retry))

    def _list(self, path: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Every item of a list, following the pages' ``next`` links."""
        page = self._get(path, params)
        if isinstance(page, list):
            return page
        items = list(page["results"])
        while page.get("next"):
            page = self._get(page["next"])
            items.extend(page["results"])
        return items


def load_json(value: JsonInput) -> Mapping[str, Any]:
    """A dict as it is, or the JSON object in the file at a path (OSError or ValueError if not)."""
    if isinstance(value, Mapping):
        return value
    text = Path(value).read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{value} holds a JSON {type(data).__name__}, not an object")
    return data


def _json(response: Any) -> Any:
    """The answer's JSON; None for an empty body (a 204)."""
    return response.json() if response.content else None


def _segment(identifier: str) -> str:
    """An analysis identifier as one URL path segment."""
    return quote(str(identifier), safe=".-_~")
