"""The simulation's environment counts what it schedules, so a stall is told without SimPy's private queue."""

from simdist.runtime.environment import CountingEnvironment


def test_every_scheduled_event_is_counted_and_pending_is_scheduled_less_processed():
    env = CountingEnvironment()
    background = {env.timeout(5.0)}  # a timer nothing waits on

    def rank(env):
        yield env.timeout(1.0)
        yield env.event()  # waits for a message that never comes

    env.process(rank(env))  # its start is an event too
    processed = 0
    while env.scheduled - processed > len(background):  # something other than the timer is pending
        env.step()
        processed += 1
    assert env.now == 1.0  # the rank is stuck: only the background timer is left
    assert env.scheduled == 3 and processed == 2  # timer, process start, the rank's timeout
    assert env.peek() == 5.0  # and SimPy agrees that the timer is what comes next
