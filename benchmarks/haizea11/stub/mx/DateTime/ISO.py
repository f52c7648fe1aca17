from mx.DateTime.Parser import DateTimeFromString as ParseDateTime  # noqa
