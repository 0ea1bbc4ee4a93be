"""The playground's request bodies: pydantic checks types and ranges, and its error names the field. The
sampling settings take what `tinyformer sample` takes (`config.check_sampling`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tinyformer.config import SAMPLING, check_sampling
from tinyformer.errors import UserError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sampling(Strict):
    """The sampling settings take what `tinyformer sample` takes: each is checked by `check_sampling`, the
    rule `SampleConfig` checks its own fields with."""

    run: str = Field(min_length=1, description="the run's name, as /api/runs lists it")
    prompt: str | None = Field(None, max_length=20_000, description="text to continue (default: the run's)")
    temperature: float | None = Field(None, description="0 = greedy, else in [0.001, 1000] (default: the run's)")
    top_k: int | None = Field(None, description="keep the k most likely tokens; 0 = off")
    top_p: float | None = Field(None, description="nucleus mass in (0, 1]; 1 = off")
    top: int = Field(20, ge=1, le=200, description="candidates of the distribution to return")

    @field_validator(*SAMPLING, check_fields=False)
    @classmethod
    def as_sample_takes_it(cls, value, info: ValidationInfo):
        if value is not None:
            try:
                check_sampling(info.field_name, value)
            except UserError as e:
                raise ValueError(str(e)) from None
        return value


class Generate(Sampling):
    top: int = Field(20, ge=0, le=200, description="candidates of each step's distribution to return; 0 = none")
    tokens: int | None = Field(None, description="new tokens (default: the run's; at most --max-tokens)")
    seed: int | None = Field(None, description="sampling seed (default: the run's)")
    stream: bool = Field(False, description="send each token as a server-sent event")


class Attention(Strict):
    run: str = Field(min_length=1)
    text: str | None = Field(None, max_length=20_000, description="the text (or give ids, for a language model)")
    ids: list[int] | None = Field(None, max_length=20_000, description="token ids, as /api/generate returned them")
    query: int | None = Field(None, ge=0, description="the token whose attention to return (default: the last)")
    part: str | None = Field(None, description="the attention stack, for a model with several")


class Predict(Strict):
    run: str = Field(min_length=1)
    inputs: dict[str, str | int | float | bool] = Field(description="the task's inputs, as /api/runs lists them")
