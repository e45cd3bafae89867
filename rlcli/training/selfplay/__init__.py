"""Turn-based games: the players a learner meets (snapshots of itself, uniform random, each game's scripted
player), Elo ratings, and what rlcli knows of particular games (boards, scripted players)."""
