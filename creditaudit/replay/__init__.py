"""creditaudit.replay"""
