"""A subscription's expression types, as RocketMQ names them (ExpressionType)."""

TAG = "TAG"  # tags joined by ||, or * for all; checked on the ConsumeQueue entry's tagsCode
SQL92 = "SQL92"  # a selector over message properties (core.filter.sql92)


def is_tag_type(expression_type: str | None) -> bool:
    """RocketMQ's ExpressionType.isTagType: no type or an empty one means TAG."""
    return not expression_type or expression_type == TAG
