"""Cohorts: tenants lend each other unused guarantees and borrow them by fair share.

``tree`` is the compiled cohort tree (who belongs where, what each lends and may borrow),
``borrowing`` the rule deciding whether a pod past its tenant's guarantee may borrow, and
``fairshare`` the weighted shares that pick the priority class and the release order.
"""
