"""Names of the drive node and the topics it publishes (relative to the node: `~/`)."""

NODE_NAME = "drive_node"
TRAJECTORY_TOPIC = "~/trajectory"
SAMPLES_TOPIC = "~/trajectory_samples"
REASONING_TOPIC = "~/reasoning"
FINISHED_PLANS_TOPIC = "~/finished_plans"
OVERLAY_TOPIC = "~/overlay"
DIAGNOSTICS_TOPIC = "/diagnostics"


def resolved(topic: str, namespace: str = "/", node_name: str = NODE_NAME) -> str:
    """`~/x` -> `<namespace>/<node_name>/x`; absolute topics are returned unchanged."""
    if not topic.startswith("~/"):
        return topic
    prefix = namespace.rstrip("/")
    return f"{prefix}/{node_name}/{topic[2:]}"
