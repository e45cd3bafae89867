"""The ALE's game names, kept here so that Atari ids are recognised where neither ale-py nor envpool is
installed (to say which extra to install instead of "unknown environment").

The 104 games of ale-py 0.12 (its ``ALE/{Game}-v5`` ids), which are also envpool 1.2's Atari tasks;
envpool spells one ``TicTacToe3d``, so both spellings are here. tests/envs/test_env_names.py checks the list
against whichever of the two is installed.
"""

ATARI_GAMES = frozenset("""
Adventure AirRaid Alien Amidar Assault Asterix Asteroids Atlantis Atlantis2 Backgammon BankHeist BasicMath
BattleZone BeamRider Berzerk Blackjack Bowling Boxing Breakout Carnival Casino Centipede ChopperCommand
CrazyClimber Crossbow Darkchambers Defender DemonAttack DonkeyKong DoubleDunk Earthworld ElevatorAction Enduro
Entombed Et FishingDerby FlagCapture Freeway Frogger Frostbite Galaxian Gopher Gravitar Hangman HauntedHouse Hero
HumanCannonball IceHockey Jamesbond JourneyEscape Kaboom Kangaroo KeystoneKapers KingKong Klax Koolaid Krull
KungFuMaster LaserGates LostLuggage MarioBros MiniatureGolf MontezumaRevenge MrDo MsPacman NameThisGame Othello
Pacman Phoenix Pitfall Pitfall2 Pong Pooyan PrivateEye Qbert Riverraid RoadRunner Robotank Seaquest SirLancelot
Skiing Solaris SpaceInvaders SpaceWar StarGunner Superman Surround Tennis Tetris TicTacToe3D TicTacToe3d
TimePilot Trondead Turmoil Tutankham UpNDown Venture VideoCheckers VideoChess VideoCube VideoPinball WizardOfWor
WordZapper YarsRevenge Zaxxon
""".split())
