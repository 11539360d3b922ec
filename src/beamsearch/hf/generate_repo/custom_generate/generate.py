"""beamsearch's searches as a ``transformers`` custom generate method: with beamsearch installed,
``model.generate(..., custom_generate=str(beamsearch.hf.CUSTOM_GENERATE_DIR), trust_remote_code=True)``
runs ``beamsearch.hf.generate`` on the call's arguments (``mode=`` and a mode's options included)
and returns what ``model.generate`` returns."""

from typing import Any

from beamsearch.hf.custom import generate_from_arguments


def generate(model: Any, **kwargs: Any) -> Any:
    """``model.generate``'s arguments, as transformers hands them to a custom generate method."""
    return generate_from_arguments(model, **kwargs)
