"""Published definitions of the peers (Jira, Lark) and the checks that read them."""
