"""QoS event callbacks that create no event handlers.

rclpy's executors can crash ("cannot use Destroyable because destruction was requested")
when a subscription's or publisher's QoS event handler is destroyed while another thread
builds the wait set. The node creates and destroys its subscriptions and publishers on
lifecycle transitions while the executor spins, so they are created without event handlers;
a missing or mismatched stream shows up on /diagnostics as a silent input instead.
"""

from __future__ import annotations

try:
    from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
except ImportError:
    from rclpy.qos_event import PublisherEventCallbacks, SubscriptionEventCallbacks


def no_subscription_events() -> SubscriptionEventCallbacks:
    return SubscriptionEventCallbacks(use_default_callbacks=False)


def no_publisher_events() -> PublisherEventCallbacks:
    return PublisherEventCallbacks(use_default_callbacks=False)
